"""A stand-in for NVIDIA Dynamo's frontend in front of reference replicas, as its source shows it:
``x-dynamo-worker-instance-id`` pins a request to a worker (else the next in the round), and an
answer names its worker only when the request asks (``nvext.extra_fields: ["worker_id"]``), as
``nvext.worker_id = {prefill_worker_id, decode_worker_id}``: in a plain answer, or in a stream's
final chunk. Worker ids are numbers, as Dynamo's instance ids are."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from ..reference.in_thread import serve
from .stand_in import StandIn

PIN = "x-dynamo-worker-instance-id"


class _Frontend(StandIn):
    workers: Mapping[str, str]  # worker id -> the replica's base URL

    def forward(self, method: str, body: bytes | None) -> None:
        worker = self.headers.get(PIN) or self.next_in_round()
        if worker not in self.workers:
            self.send(404, b'{"error": {"message": "no such worker"}}', "application/json")
            return
        status, data, kind = self.relay(method, body, self.workers[worker])
        request = json.loads(body) if body else {}
        asked = "worker_id" in ((request.get("nvext") or {}).get("extra_fields") or [])
        if asked and status == 200 and self.path.startswith("/v1/chat/completions"):
            data = _named(data, {"worker_id": {"prefill_worker_id": int(worker), "decode_worker_id": int(worker)}})
        self.send(status, data, kind)


def _named(data: bytes, nvext: dict[str, Any]) -> bytes:
    """The answer with ``nvext`` on it: a plain answer's object, or a stream's last chunk."""
    if not data.lstrip().startswith(b"data:"):
        return json.dumps({**json.loads(data), "nvext": nvext}).encode()
    lines = data.split(b"\n")
    chunks = [i for i, line in enumerate(lines) if line.startswith(b"data: {")]
    lines[chunks[-1]] = b"data: " + json.dumps({**json.loads(lines[chunks[-1]][6:]), "nvext": nvext}).encode()
    return b"\n".join(lines)


def frontend(workers: Mapping[str, str]) -> AbstractContextManager[str]:
    """Serve the frontend over ``workers`` (id -> replica URL) until the block ends; its base URL."""
    return serve(_Frontend.bound(workers=dict(workers), pool=itertools.cycle(list(workers))))
