"""The reference server: a SIMULATED, conforming OpenAI-compatible deployment.

It is a deterministic oracle for demos and for the project's own tests — not vLLM and not a
model. It answers the protocol's tasks by reading each request and looking up the project's own
fixture and corpus ground truth, never by looking at test names, and it labels itself as
simulated in ``/v1/models`` and ``/version``. Fault switches make it misbehave on purpose so the
project can prove that every module can fail.
"""

SIMULATED_LABEL = "pytest-qualify reference server (SIMULATED, not vLLM)"
