"""Run settings, each reachable from the command line, the environment and an ini key.

Precedence, highest first: command-line option > environment variable > ini key > default.
(A ``qualify_repeat`` marker on a module or test then pins that test's own repetition count.)
"""

from __future__ import annotations

import math
import shlex
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Mode(StrEnum):
    """How the run reaches its server: it launches the profile's recipe, attaches to a running
    endpoint (``--qualify-endpoint URL``), or starts the SIMULATED reference server
    (``--qualify-endpoint reference``, the word the option takes)."""

    LAUNCH = "launch"
    ATTACH = "attach"
    REFERENCE = "reference"


class SettingsError(ValueError):
    """A setting with a value that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class Option:
    dest: str
    flag: str
    env: str
    ini: str
    help: str
    default: str | None = None
    metavar: str = "VALUE"  # as the README's table writes it
    switch: bool = False  # a flag without a value (its environment variable: 1/true/yes)


@dataclass(frozen=True)
class Source:
    """Where a setting's value came from, for an error message that sends the operator there."""

    kind: str  # "cli" | "env" | "ini" | "default"
    option: Option

    def __str__(self) -> str:
        if self.kind == "env":
            return f"environment variable {self.option.env} (for {self.option.flag})"
        if self.kind == "ini":
            return f"ini key {self.option.ini} (for {self.option.flag})"
        return self.option.flag


OPTIONS: tuple[Option, ...] = (
    Option("qualify", "--qualify", "QUALIFY_PROFILE", "qualify_profile",
           "qualify a deployment with this profile: a built-in name or a path to a TOML file",
           metavar="PROFILE"),
    Option("qualify_repeat", "--repeat", "QUALIFY_REPEAT", "qualify_repeat",
           "run every protocol test N times, each repetition its own test item", "1", "N"),
    Option("qualify_endpoint", "--qualify-endpoint", "QUALIFY_ENDPOINT", "qualify_endpoint",
           "attach to a running OpenAI-compatible server at URL instead of launching vLLM; "
           "'reference' starts the built-in simulated reference server", metavar="URL"),
    Option("qualify_api_key_env", "--qualify-api-key-env", "QUALIFY_API_KEY_ENV", "qualify_api_key_env",
           "name of the environment variable that holds the endpoint's API key", "QUALIFY_API_KEY", "NAME"),
    Option("qualify_evidence", "--qualify-evidence", "QUALIFY_EVIDENCE", "qualify_evidence",
           "directory for the evidence bundle", "qualify-evidence", "DIR"),
    Option("qualify_serve_command", "--qualify-serve-command", "QUALIFY_SERVE_COMMAND", "qualify_serve_command",
           "command prefix that launches vLLM, replacing the profile's (e.g. "
           "'python -m vllm.entrypoints.openai.api_server --model {model}')", metavar="CMD"),
    Option("qualify_startup_timeout", "--qualify-startup-timeout", "QUALIFY_STARTUP_TIMEOUT",
           "qualify_startup_timeout", "seconds to wait for a launched server, replacing the profile's", metavar="S"),
    Option("qualify_waivers", "--qualify-waivers", "QUALIFY_WAIVERS", "qualify_waivers",
           "TOML file of operator waivers for failed corpus items (item id, or glob with expect = N; reason, expires)",
           metavar="FILE"),
    Option("qualify_baseline", "--qualify-baseline", "QUALIFY_BASELINE", "qualify_baseline",
           "an earlier run's summary.json: report per-lane and throughput deltas against it",
           metavar="SUMMARY"),
    Option("qualify_fail_on_regression", "--qualify-fail-on-regression", "QUALIFY_FAIL_ON_REGRESSION",
           "qualify_fail_on_regression",
           "with --qualify-baseline: a regression beyond PCT percent fails the gate "
           "(without it, regressions beyond 10% are flagged only)", metavar="PCT"),
    Option("qualify_stage", "--qualify-stage", "QUALIFY_STAGE", "qualify_stage",
           "the promotion stage to run: preflight, full (the whole protocol: the only qualification) "
           "post-promotion, rollback, or timing (one boot of a comparison: python -m pytest_qualify ab)", "full", "STAGE"),
    Option("qualify_promoted", "--qualify-promoted", "QUALIFY_PROMOTED", "qualify_promoted",
           "with --qualify-stage post-promotion (or rollback, where it is required): the qualifying run's "
           "summary.json; the live route must serve exactly the identity it qualified", metavar="SUMMARY"),
    Option("qualify_promoted_key", "--qualify-promoted-key", "QUALIFY_PROMOTED_KEY", "qualify_promoted_key",
           "with --qualify-promoted: the public key (PEM; ECDSA P-256 as cosign makes, or Ed25519) the promoted "
           "bundle's signature (qualification.sigstore.json, cosign attest-blob --key) must verify against; "
           "required where the profile's [promotion] require_signature is true", metavar="PEM"),
    Option("qualify_selftest", "--qualify-selftest", "QUALIFY_SELFTEST", "qualify_selftest",
           "instead of qualifying: run the profile's protocol against the reference server once conforming "
           "and once per fault class its modules can see, and check the gate passes the first and fails "
           "each fault in its own module; writes selftest.json into an evidence bundle", switch=True),
    Option("qualify_fleet", "--qualify-fleet", "QUALIFY_FLEET", "qualify_fleet",
           "instead of one endpoint: every replica of the profile's [fleet] (--qualify-endpoint: its router, or "
           "'reference' for the SIMULATED fleet), each graded by the run's stage; one fleet bundle (docs/fleet.md)",
           switch=True),
    Option("qualify_require_selftest", "--qualify-require-selftest", "QUALIFY_REQUIRE_SELFTEST",
           "qualify_require_selftest",
           "refuse to qualify (usage error) without a passing gate self-test of this plugin version no older "
           "than DAYS: the newest in the evidence folder, or the one at PATH (a selftest.json or its bundle)",
           metavar="DAYS[:PATH]"),
)


@dataclass(frozen=True)
class Settings:
    profile: str | None
    repeat: int
    endpoint: str | None  # None: launch vLLM; Mode.REFERENCE's word; or a URL
    api_key_env: str
    evidence_dir: Path
    serve_command: tuple[str, ...] | None
    startup_timeout_s: float | None
    reference_faults: tuple[str, ...] = ()
    waivers: str | None = None
    baseline: str | None = None
    fail_on_regression_pct: float | None = None  # None: regressions are flagged, not failed
    stage: str = "full"
    promoted: str | None = None
    promoted_key: str | None = None
    selftest: bool = False
    require_selftest: str | None = None
    fleet: bool = False

    @property
    def active(self) -> bool:
        return bool(self.profile)

    @property
    def mode(self) -> Mode:
        if self.endpoint is None:
            return Mode.LAUNCH
        return Mode.REFERENCE if self.endpoint == Mode.REFERENCE else Mode.ATTACH


def seconds(text: str, where: object) -> float:
    """A timeout in seconds: a finite number above zero (a zero, negative or endless wait is a
    mistake the operator can fix, never a server that did not start in time)."""
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{where}: expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{where}: expected a number of seconds above 0, got {text!r}")
    return value


def resolve(
    cli: Mapping[str, object],
    env: Mapping[str, str],
    ini: Callable[[str], str | None],
    reference_faults: tuple[str, ...] = (),
) -> Settings:
    values: dict[str, str | None] = {}
    sources: dict[str, Source] = {}
    for opt in OPTIONS:
        value, kind = cli.get(opt.dest), "cli"
        if value is None:
            value, kind = env.get(opt.env) or None, "env"
        if value is None:
            value, kind = ini(opt.ini) or None, "ini"
        if value is None:
            kind = "default"
        values[opt.dest] = str(value) if value is not None else opt.default
        sources[opt.dest] = Source(kind, opt)

    try:
        repeat = int(values["qualify_repeat"] or "1")
    except ValueError:
        raise SettingsError(
            f"{sources['qualify_repeat']}: expected a whole number, got {values['qualify_repeat']!r}"
        ) from None
    if repeat < 1:
        raise SettingsError(f"{sources['qualify_repeat']}: expected at least 1, got {repeat}")

    endpoint = values["qualify_endpoint"]
    if endpoint and endpoint != Mode.REFERENCE:
        parsed = urllib.parse.urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise SettingsError(
                f"{sources['qualify_endpoint']}: {endpoint!r} is not a URL (expected http://HOST:PORT or 'reference')"
            )
        try:
            parsed.port
        except ValueError:
            raise SettingsError(f"{sources['qualify_endpoint']}: {endpoint!r} has an invalid port") from None
        endpoint = endpoint.rstrip("/")
        if endpoint.endswith("/v1"):
            endpoint = endpoint[: -len("/v1")]

    timeout = values["qualify_startup_timeout"]
    startup_timeout_s = seconds(timeout, sources["qualify_startup_timeout"]) if timeout else None

    fail_pct = values["qualify_fail_on_regression"]
    fail_on_regression_pct = None
    if fail_pct is not None:
        where = sources["qualify_fail_on_regression"]
        try:
            fail_on_regression_pct = float(fail_pct)
        except ValueError:
            raise SettingsError(f"{where}: expected a percentage, got {fail_pct!r}") from None
        if not math.isfinite(fail_on_regression_pct) or fail_on_regression_pct < 0:
            raise SettingsError(f"{where}: expected a percentage >= 0, got {fail_pct!r}")
        if not values["qualify_baseline"] and values["qualify"]:
            raise SettingsError(f"{where.option.flag} needs --qualify-baseline")

    from pytest_qualify.promotion.stages import check_stage_name

    stage = values["qualify_stage"] or "full"
    try:
        check_stage_name(stage)
    except ValueError as exc:
        raise SettingsError(f"{sources['qualify_stage']}: {exc}") from None

    require_selftest = values["qualify_require_selftest"]
    if require_selftest:
        try:
            SelftestRequirement.parse(require_selftest)
        except ValueError as exc:
            raise SettingsError(f"{sources['qualify_require_selftest']}: {exc}") from None

    command = values["qualify_serve_command"]
    return Settings(
        profile=values["qualify"],
        repeat=repeat,
        endpoint=endpoint,
        api_key_env=values["qualify_api_key_env"] or "QUALIFY_API_KEY",
        evidence_dir=Path(values["qualify_evidence"] or "qualify-evidence"),
        serve_command=tuple(shlex.split(command)) if command else None,
        startup_timeout_s=startup_timeout_s,
        reference_faults=tuple(reference_faults),
        waivers=values["qualify_waivers"],
        baseline=values["qualify_baseline"],
        fail_on_regression_pct=fail_on_regression_pct,
        stage=stage,
        promoted=values["qualify_promoted"],
        promoted_key=values["qualify_promoted_key"],
        selftest=(values["qualify_selftest"] or "").strip().lower() in ("1", "true", "yes", "on"),
        require_selftest=require_selftest,
        fleet=(values["qualify_fleet"] or "").strip().lower() in ("1", "true", "yes", "on"),
    )


@dataclass(frozen=True)
class SelftestRequirement:
    """``--qualify-require-selftest DAYS`` (the newest self-test in the evidence folder) or
    ``DAYS:PATH`` (that ``selftest.json`` or its bundle folder)."""

    max_age_days: float
    path: Path | None = None

    @classmethod
    def parse(cls, text: str) -> "SelftestRequirement":
        days_text, _, path = text.partition(":")
        try:
            days = float(days_text)
        except ValueError:
            raise ValueError(f"expected DAYS or DAYS:PATH (e.g. 7 or 7:qualify-evidence/<run id>), got {text!r}") from None
        if days <= 0:
            raise ValueError(f"expected a number of days above 0, got {days_text!r}")
        return cls(days, Path(path).expanduser() if path else None)
