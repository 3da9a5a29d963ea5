"""What "the same request" means, said once: a request's key leaves out what two honest asks of it
may differ in (the cache salt, streaming and its options, the client's own time limit and size
hint, which are never sent). The answer journal keys answers by it (``evidence/answers.py``), the
reference server's response-cache fault (``reference/handler.py``) and the steering proxy
(``reference/steer.py``, which also leaves out the token limit: the tokens vLLM spent on a forced
answer do not depend on the caller's limit) key their memories by it. On the ground floor."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# Fields two honest asks of the same request may differ in.
NOT_IN_KEY = frozenset({"cache_salt", "stream", "stream_options", "timeout_s", "prompt_tokens_hint"})
LIMIT_FIELDS = frozenset({"max_tokens", "max_completion_tokens"})


def request_key(body: Mapping[str, Any], *, without_limit: bool = False) -> str:
    """A digest of the request body (``messages`` and every field that changes the answer);
    ``without_limit``: the token limit left out too."""
    left_out = NOT_IN_KEY | LIMIT_FIELDS if without_limit else NOT_IN_KEY
    kept = {k: v for k, v in body.items() if k not in left_out}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:32]
