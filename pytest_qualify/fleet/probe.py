"""What the fleet's replicas say, asked over HTTP: readiness (a bounded wait on ``/health``), the
fingerprint readings, short chat probes (each with a unique prefix, so no cache and no affinity
joins two of them) and the request counts ``/metrics`` shows, per replica or per ``engine`` label.
No judging here (``fingerprint.py``, ``judge.py``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_qualify.fleet.fingerprint import Fingerprint, cache_flags, server_info_pairs
from pytest_qualify.fleet.spec import Channel, Replica
from pytest_qualify.promotion.identity import read_identity
from pytest_qualify.server.facts import cache_config_info

SUCCESS_COUNTER = "vllm:request_success"
PROBE_MAX_TOKENS = 8


class Asker:
    """One way in: a base URL with the API key and, through a router, the replica's pin header."""

    def __init__(self, base_url: str, *, api_key: str | None, pin: tuple[str, str] | None = None,
                 timeout_s: float = 60.0) -> None:
        import httpx

        from pytest_qualify.client.endpoint import tls_context

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if pin is not None:
            headers[pin[0]] = pin[1]
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s, verify=tls_context())

    def close(self) -> None:
        self.http.close()

    @classmethod
    def of(cls, replica: Replica, channel: Channel, router: str | None, api_key: str | None,
           timeout_s: float = 60.0) -> Asker:
        if replica.url:
            return cls(replica.url, api_key=api_key, timeout_s=timeout_s)
        assert router is not None and channel.pin_header and replica.pin is not None
        return cls(router, api_key=api_key, pin=(channel.pin_header, replica.pin), timeout_s=timeout_s)


@dataclass(frozen=True)
class Readiness:
    ready: bool
    waited_s: float
    last: str  # the last answer: "HTTP 200", "HTTP 503", "ConnectError: ..."

    def as_dict(self) -> dict[str, Any]:
        return {"ready": self.ready, "waited_s": round(self.waited_s, 3), "last": self.last}


def wait_ready(asker: Asker, deadline: float, clock: Callable[[], float] = time.monotonic,
               interval_s: float = 0.5) -> Readiness:
    """``/health`` until it answers 200 or the monotonic ``deadline`` passes (one last try at it)."""
    start = clock()
    while True:
        try:
            status = asker.http.get("/health").status_code
            last = f"HTTP {status}"
            if status == 200:
                return Readiness(True, clock() - start, last)
        except Exception as exc:  # noqa: BLE001 - not listening yet, refused, reset
            last = f"{type(exc).__name__}: {exc}"
        if clock() >= deadline:
            return Readiness(False, clock() - start, last)
        time.sleep(min(interval_s, max(0.0, deadline - clock())))


def _get_json(asker: Asker, path: str) -> tuple[Any, str | None, int | None]:
    try:
        response = asker.http.get(path)
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}", None
    if response.status_code != 200:
        return None, f"HTTP {response.status_code}", response.status_code
    try:
        return response.json(), None, 200
    except ValueError:
        return None, "not JSON", 200


def metrics_text(asker: Asker) -> str | None:
    try:
        response = asker.http.get("/metrics")
    except Exception:  # noqa: BLE001 - /metrics not reachable: its figures are not visible here
        return None
    return response.text if response.status_code == 200 else None


def read_fingerprint(asker: Asker, served_name: str) -> Fingerprint:
    """``/v1/models``, ``/version``, ``/metrics`` (``vllm:cache_config_info``) and ``/server_info``."""
    errors: list[str] = []
    models, models_error, _ = _get_json(asker, "/v1/models")
    entries = models.get("data") if isinstance(models, Mapping) else None
    if models_error is None and not isinstance(entries, list):
        models_error = "no 'data' list"
    version_doc, version_error, _ = _get_json(asker, "/version")
    version = version_doc.get("version") if isinstance(version_doc, Mapping) else None
    identity = read_identity(served_name, entries if isinstance(entries, list) else None,
                             str(version) if version is not None else None,
                             models_error=models_error, version_error=version_error)
    if identity.error:
        errors.append(identity.error)
    text = metrics_text(asker)
    labels = cache_config_info(text)
    if labels is None:
        errors.append("/metrics shows no vllm:cache_config_info" if text is not None else "/metrics not reachable")
    info, info_error, status = _get_json(asker, "/server_info")
    pairs = server_info_pairs(info) if info_error is None else None
    if info_error is not None and status not in (404, 405):
        errors.append(f"/server_info: {info_error}")
    return Fingerprint(identity, cache_flags(labels), pairs, tuple(errors))


@dataclass(frozen=True)
class Probe:
    """One short chat request and what came back."""

    status: int | None  # None: no HTTP answer
    served_by: str | None
    e2e_s: float
    error: str | None = None
    content: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "served_by": self.served_by, "e2e_s": round(self.e2e_s, 4),
                "error": self.error, "content": self.content}


def chat_probe(asker: Asker, served_name: str, channel: Channel, *, nonce: str | None = None) -> Probe:
    """A short, ungraded chat request whose prompt starts with a unique prefix."""
    tag = nonce or uuid.uuid4().hex[:12]
    body = channel.asks({"model": served_name, "max_tokens": PROBE_MAX_TOKENS, "temperature": 0,
                         "messages": [{"role": "user", "content": f"[fleet probe {tag}] Reply with the word: ready"}]})
    start = time.perf_counter()
    try:
        response = asker.http.post("/v1/chat/completions", json=body)
    except Exception as exc:  # noqa: BLE001
        return Probe(None, None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
    e2e = time.perf_counter() - start
    try:
        payload = response.json()
    except ValueError:
        payload = None
    served_by = channel.served_by(response.headers, payload)
    if response.status_code != 200:
        return Probe(response.status_code, served_by, e2e, f"HTTP {response.status_code}")
    content = None
    try:
        content = payload["choices"][0]["message"].get("content")
    except (TypeError, KeyError, IndexError):
        pass
    return Probe(200, served_by, e2e, None, content)


def success_counts(text: str | None, label: str | None = None) -> dict[str, float] | None:
    """``vllm:request_success`` summed over its samples: ``{"": total}``, or per value of ``label``
    (vLLM's ``engine`` for its DP ranks); empty when the text holds none yet (a server that has
    answered nothing); None when there is no text to read."""
    if not text:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in (f"{SUCCESS_COUNTER}_total", "vllm_request_success_total"):
                    continue
                key = sample.labels.get(label, "") if label else ""
                out[key] = out.get(key, 0.0) + float(sample.value)
    except ValueError:
        return None
    return out


def delta(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> dict[str, float] | None:
    if before is None or after is None:
        return None
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in sorted(set(before) | set(after))}
