"""The server room: the target's lifecycle (launch, attach, the reference server), its health and liveness. No pytest."""
