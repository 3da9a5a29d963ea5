"""What the server says it is, read once as it comes up (``/version``, ``/v1/models`` and, attached,
one minimal chat request), and the run's first step judged from it: a rejected key, a non-OpenAI
endpoint or no answer stops the run not judged; a served identity or engine version that is not the
profile's stops it as a judged FAIL after the smoke module. No pytest: ``hooks/server_session.py``
reads it at start into the run state (``RunState.server_info``), ``hooks/steps.py`` takes the first
step, and the xdist hand-over (``server-handover.json``) carries it to every worker as
:meth:`ServerInfo.as_dict`, rebuilt there with :meth:`ServerInfo.of`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from pytest_qualify.client.errors import ErrorKind, kind_of
from pytest_qualify.settings import Mode

if TYPE_CHECKING:
    from pytest_qualify.profiles import Profile
    from pytest_qualify.promotion.identity import DeclaredField
    from pytest_qualify.server.target import Target

# A status travels whenever its request failed, even when there was none (no HTTP answer at all).
_STATUS_OF = {"version_status": "version_error", "models_status": "models_error", "chat_status": "chat_error",
              "models_error_kind": "models_error"}


@dataclass(frozen=True)
class ServerInfo:
    """What the server said it is. ``simulated``: the reference server, or an endpoint whose
    ``/version`` or ``/v1/models`` says ``"simulated": true``. A field is None where nothing was read."""

    mode: str
    simulated: bool
    version: str | None = None  # /version's engine version ("" when it named none)
    version_error: str | None = None
    version_status: int | None = None
    models: tuple[Any, ...] | None = None  # /v1/models' entries
    models_error: str | None = None
    models_status: int | None = None
    models_error_kind: ErrorKind | None = None  # a word, so it survives the JSON hand-over
    chat_status: int | None = None  # attached: the minimal chat request refused
    chat_error: str | None = None
    launch_command: str | None = None
    # xdist workers use these to tell a dead server from a failing request on their own.
    server_pid: int | None = None
    server_log: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields that were read (a failed request's status always), as JSON takes them: the
        hand-over's ``server_info`` and ``pytest_qualify_target_started``'s."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None or (f.name in _STATUS_OF and getattr(self, _STATUS_OF[f.name]) is not None):
                out[f.name] = list(value) if f.name == "models" else value
        return out

    @classmethod
    def unanswered(cls, mode: str) -> ServerInfo:
        """The reading of a server that never answered: it said nothing, every field is None."""
        return cls(mode=mode, simulated=False)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> ServerInfo:
        """From :meth:`as_dict` (a worker's copy of the hand-over)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("models") is not None:
            values["models"] = tuple(values["models"])
        if values.get("models_error_kind") is not None:
            values["models_error_kind"] = ErrorKind(values["models_error_kind"])
        return cls(**{"mode": "", "simulated": False, **values})


@dataclass(frozen=True)
class Stop:
    """The run stopped at its first step. ``judged``: a served identity that is not the profile's
    is a judged FAIL; otherwise (a rejected key, not an OpenAI-compatible endpoint, no answer) the
    deployment was not judged and the run is INCOMPLETE. ``keeps``: the protocol modules whose items
    still run (the smoke module after a judged stop, so its identity items show the readings);
    ``reason`` is the verdict's."""

    reason: str
    judged: bool
    keeps: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """As JSON takes it: the xdist hand-over's ``stop``."""
        return {"reason": self.reason, "judged": self.judged, "keeps": list(self.keeps)}

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Stop:
        """From :meth:`as_dict` (a worker's copy of the hand-over)."""
        return cls(str(data["reason"]), bool(data["judged"]), tuple(data.get("keeps") or ()))


def _not_judged(why: str) -> Stop:
    """A stop that leaves the deployment not judged: nothing runs, the run is INCOMPLETE."""
    return Stop(f"not judged: {why}", judged=False)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_server_info(client: Any, mode: Mode, target: Target | None) -> ServerInfo:
    """Ask the server what it is (every failure recorded, judged by :func:`first_step` and the
    smoke module). ``client``: a ``QualifyClient`` on the endpoint; the caller closes it."""
    info: dict[str, Any] = {"mode": mode, "simulated": mode == Mode.REFERENCE}
    try:
        body = client.get_json("/version")
        info["version"] = str(body.get("version", "")) if isinstance(body, dict) else ""
        info["simulated"] = info["simulated"] or (isinstance(body, dict) and body.get("simulated") is True)
    except Exception as exc:  # recorded, judged by the first step and the smoke module
        info["version_error"] = str(exc)
        info["version_status"] = getattr(exc, "status", None)
    try:
        body = client.get_json("/v1/models")
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise ValueError(f"GET /v1/models answered no model list (got {str(body)[:80]!r})")
        info["models"] = tuple(body["data"])
        info["simulated"] = info["simulated"] or any(
            isinstance(m, dict) and m.get("simulated") is True for m in body["data"])
    except Exception as exc:
        info["models_error"] = _first_line(exc)
        info["models_status"] = getattr(exc, "status", None)
        info["models_error_kind"] = kind_of(exc)
    if mode == Mode.ATTACH and "models" in info:
        # One minimal chat request: a key that lists the models may still be refused on chat.
        try:
            client.chat([{"role": "user", "content": "Say OK."}], max_tokens=1, temperature=0)
        except Exception as exc:  # judged by the first step (401/403) and by the smoke module
            info["chat_status"] = getattr(exc, "status", None)
            info["chat_error"] = _first_line(exc)
    if target is not None:
        info["launch_command"] = target.display_command
        if target.process is not None:
            info["server_pid"] = target.process.pid
            info["server_log"] = str(target.process.spec.log_path)
    return ServerInfo(**info)


def first_step(info: ServerInfo, profile: Profile, *, mode: Mode, startup_error: str | None, api_key_env: str,
               launch_argv: Sequence[str] | None = None) -> tuple[Stop | None, list[DeclaredField] | None]:
    """The run's first step, once the server answers: health, authentication and identity, read
    from what the server said as it came up. ``(stop, declared)``: ``stop`` is None to go on, else
    the :class:`Stop`: not judged (a rejected key, not an OpenAI-compatible endpoint, no answer) is
    INCOMPLETE and runs nothing; a served identity that is not the profile's is a judged FAIL, and
    only the smoke module still runs (its identity items show the readings). ``declared``: the
    profile's declared fields held against what is served (None when the step stopped before
    reading them). ``launch_argv``: the launch command, in launch mode."""
    from pytest_qualify.graders.identity import check_identity
    from pytest_qualify.promotion.identity import DIFFERS, declared_fields, engine_version_reason, read_identity

    if startup_error:
        if mode == Mode.ATTACH:
            return _not_judged(startup_error.splitlines()[0]), None
        return None, None  # a failed launch: every protocol item reports it with the command and log tail
    status = info.models_status
    if info.models_error is not None:
        error = info.models_error
        if status in (401, 403):
            why = error if info.models_error_kind == ErrorKind.AUTH_REJECTED else (
                f"the endpoint refused the API key (the key is read from ${api_key_env}): "
                f"HTTP {status} on GET /v1/models")
            return _not_judged(why), None
        if status == 404 or info.models_error_kind == ErrorKind.NOT_OPENAI:
            return _not_judged("not an OpenAI-compatible endpoint: GET /v1/models "
                               + (f"answered HTTP {status}" if status else f"answered no model list ({error})")), None
        return _not_judged(f"the endpoint did not answer GET /v1/models: {error}"), None
    if info.chat_status in (401, 403):
        return _not_judged(f"credentials refused on chat: HTTP {info.chat_status} on POST /v1/chat/completions "
                           f"although GET /v1/models accepted the key (the key is read from ${api_key_env})"), None
    d = profile.deployment
    models = list(info.models or [])
    verdict = check_identity(models, d.served_name, d.model, profile.limits.window_tokens)
    problems = [] if verdict.ok else [verdict.reason]
    if info.version is not None:
        engine = engine_version_reason(d.engine, info.version)
        if engine:
            problems.append(engine)
    served = read_identity(d.served_name, list(info.models) if info.models is not None else None, info.version)
    declared = declared_fields(d, launch_argv=launch_argv, served=served)
    problems += [f.reason() for f in declared if f.status == DIFFERS and f.name != "engine version"]
    if problems:
        return Stop("the served identity is not the profile's (stopped after the smoke module): " + "; ".join(problems),
                    judged=True, keeps=("smoke",)), declared
    return None, declared
