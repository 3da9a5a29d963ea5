"""The fleet the operator expects: its replicas (each with an id, and its own URL or a pin through
the router), the router in front of them, and the channel through which an answer is attributed to
its replica (``channels.toml``). Read from the command line; a mistake is a :class:`FleetUsageError`
(exit 4, before anything is asked)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pytest_qualify.datafile import read_toml

CHANNELS_FILE = Path(__file__).with_name("channels.toml")


class FleetUsageError(ValueError):
    """A fleet the operator named that cannot be asked as named; the message says what to change."""


@dataclass(frozen=True)
class Channel:
    """How one stack pins a request to a replica and says which replica served it (``channels.toml``)."""

    name: str
    description: str
    ids: str  # "given" | "ranks" | "learned"
    pin_header: str | None = None
    served_by_header: str | None = None
    served_by_field: str | None = None
    metrics_label: str | None = None
    request_fields: Mapping[str, Any] | None = None

    @property
    def names_server(self) -> bool:
        """An answer itself says which replica served it."""
        return bool(self.served_by_header or self.served_by_field)

    def served_by(self, headers: Mapping[str, str], body: Any = None) -> str | None:
        """The replica an answer names: its header, or its JSON field (a dotted path), else None."""
        if self.served_by_header:
            lower = {k.lower(): v for k, v in headers.items()}
            value = lower.get(self.served_by_header.lower())
            if value:
                return value
        if self.served_by_field and isinstance(body, Mapping):
            node: Any = body
            for part in self.served_by_field.split("."):
                node = node.get(part) if isinstance(node, Mapping) else None
            if node is not None:
                return str(node)
        return None

    def asks(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A chat request's body with the fields this channel needs for its answer to name the replica
        merged in (a list joined without repeats; a value the caller set is kept)."""
        return _merged(body, self.request_fields or {})


def _merged(into: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(into)
    for key, value in extra.items():
        have = out.get(key)
        if key not in out:
            out[key] = _merged({}, value) if isinstance(value, Mapping) else list(value) if isinstance(value, list) else value
        elif isinstance(have, Mapping) and isinstance(value, Mapping):
            out[key] = _merged(have, value)
        elif isinstance(have, list) and isinstance(value, list):
            out[key] = have + [v for v in value if v not in have]
    return out


@cache
def channels() -> dict[str, Channel]:
    data = read_toml(CHANNELS_FILE, "fleet channels", FleetUsageError)["channels"]
    return {name: Channel(name=name, **row) for name, row in data.items()}


@dataclass(frozen=True)
class Replica:
    """One expected replica: asked at ``url`` when it has one, else through the router pinned with ``pin``."""

    id: str
    url: str | None = None
    pin: str | None = None

    def describe(self) -> str:
        return self.url or f"pinned {self.pin!r}"


@dataclass(frozen=True)
class FleetSpec:
    replicas: tuple[Replica, ...]
    channel: Channel
    router: str | None = None
    ready_timeout_s: float = 60.0
    probes_per_replica: int = 3
    e2e_limit_s: float | None = None  # a pinned probe's end to end over this fails its replica
    api_key_env: str = ""
    # The channel learns the ids (llm-d's session tokens) from the router's answers: how many replicas
    # the fleet expects. ``replicas`` is empty until the run has learned them.
    learn_count: int | None = None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.replicas)

    @property
    def learns(self) -> bool:
        return self.learn_count is not None

    @property
    def expected_count(self) -> int:
        return self.learn_count if self.learn_count is not None else len(self.replicas)

    def as_dict(self) -> dict[str, Any]:
        return {"router": self.router, "channel": self.channel.name, "channel_description": self.channel.description,
                "replicas": [{"id": r.id, "url": r.url, "pin": r.pin} for r in self.replicas],
                "replica_count": self.expected_count, "ids_learned": self.learns,
                "ready_timeout_s": self.ready_timeout_s, "probes_per_replica": self.probes_per_replica,
                "e2e_limit_s": self.e2e_limit_s}


def _url(text: str, what: str) -> str:
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise FleetUsageError(f"{what} {text!r}: expected an http(s) URL")
    return text.rstrip("/")


def build_spec(*, replicas: Sequence[str] = (), router: str | None = None, replica_count: int | None = None,
               replica_ids: Sequence[str] = (), channel: str = "direct", ready_timeout_s: float = 60.0,
               probes_per_replica: int = 3, e2e_limit_s: float | None = None, api_key_env: str = "") -> FleetSpec:
    """The fleet from its parts: ``replicas`` as ``URL`` or ``ID=URL`` (each asked at its own URL);
    or a ``router`` with a ``replica_count`` or ``replica_ids`` (each asked through the router, pinned
    by the channel). The count, when given with the list, must agree with it. A channel whose ids are
    learned takes the router and the count alone: the run learns the ids from the router's answers."""
    known = channels()
    if channel not in known:
        raise FleetUsageError(f"--channel {channel!r}: expected one of {', '.join(known)}")
    chan = known[channel]
    if router is not None:
        router = _url(router, "--router")
    for label, value in (("--ready-timeout", ready_timeout_s), ("--replica-e2e-limit", e2e_limit_s)):
        if value is not None and not value > 0:
            raise FleetUsageError(f"{label} {value}: expected seconds above 0")
    if probes_per_replica < 1:
        raise FleetUsageError(f"--probes {probes_per_replica}: expected at least 1 probe a replica")
    out: list[Replica] = []
    if replicas:
        for i, text in enumerate(replicas, 1):
            rid, sep, url = text.partition("=")
            if not sep or "://" in rid:
                rid, url = (replica_ids[i - 1] if i <= len(replica_ids) else f"replica-{i}"), text
            out.append(Replica(rid, url=_url(url, "--replicas"), pin=rid if chan.pin_header else None))
    elif router is None:
        raise FleetUsageError("name the fleet: --replicas URL... (each replica's own URL), or --router URL with "
                              "--replica-count N or --replica-ids ID,...")
    elif chan.pin_header is None:
        raise FleetUsageError(f"--channel {channel}: it has no pin through the router, so each replica can be asked "
                              "alone only at its own URL: name them with --replicas URL...")
    elif replica_ids:
        out = [Replica(rid, pin=rid) for rid in replica_ids]
    elif replica_count is not None and chan.ids == "ranks":
        out = [Replica(str(rank), pin=str(rank)) for rank in range(replica_count)]
    elif replica_count is not None and chan.ids == "learned":
        if replica_count < 1:
            raise FleetUsageError(f"--replica-count {replica_count}: expected at least 1 replica")
        return FleetSpec((), chan, router, ready_timeout_s, probes_per_replica, e2e_limit_s, api_key_env,
                         learn_count=replica_count)
    elif chan.ids == "learned":
        raise FleetUsageError(f"--channel {channel}: say how many replicas serve behind the router with "
                              f"--replica-count N (their {chan.pin_header} values are learned from its answers), "
                              "or name the values with --replica-ids ID,...")
    else:
        raise FleetUsageError(f"--channel {channel}: name the replicas with --replica-ids ID,... (the values its "
                              f"{chan.pin_header} pin takes)")
    ids = [r.id for r in out]
    if len(set(ids)) != len(ids):
        raise FleetUsageError(f"replica ids must be unique: {', '.join(ids)}")
    count = replica_count if replica_count is not None else len(out)
    if count < 1:
        raise FleetUsageError(f"--replica-count {count}: expected at least 1 replica")
    if count != len(out):
        raise FleetUsageError(f"--replica-count {count} but {len(out)} replicas are named ({', '.join(ids)})")
    return FleetSpec(tuple(out), chan, router, ready_timeout_s, probes_per_replica, e2e_limit_s, api_key_env)
