"""The client room: the one way to talk to an OpenAI-compatible endpoint (chat, /tokenize, /metrics, /health) and its timing."""
