"""A stand-in for llm-d's endpoint picker in front of reference replicas, as its session-affinity
scorer shows it: every answer carries ``x-session-token``, the base64 of the serving pod's
``namespace/name``, and a request carrying a pod's token goes to that pod; any other request (no
token, or one naming no pod) goes to the next pod of the round. ``unrouted`` pods are left out of
the round (a pod the picker never picks), as a scorer that always rates one pod zero would."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager

from ..reference.in_thread import serve
from .stand_in import StandIn

TOKEN = "x-session-token"
NAMESPACE = "default"


def token(pod: str) -> str:
    """The pod's session token, as the picker writes it."""
    return base64.b64encode(f"{NAMESPACE}/{pod}".encode()).decode()


class _Picker(StandIn):
    pods: Mapping[str, str]  # token -> the pod's base URL

    def forward(self, method: str, body: bytes | None) -> None:
        asked = self.headers.get(TOKEN)
        pod = asked if asked in self.pods else self.next_in_round()
        self.send(*self.relay(method, body, self.pods[pod]), {TOKEN: pod})


def picker(pods: Mapping[str, str], unrouted: Collection[str] = ()) -> AbstractContextManager[str]:
    """Serve the picker over ``pods`` (name -> replica URL) until the block ends; its base URL."""
    by_token = {token(name): url for name, url in pods.items()}
    round_ = [token(name) for name in pods if name not in unrouted]
    return serve(_Picker.bound(pods=by_token, pool=itertools.cycle(round_)))
