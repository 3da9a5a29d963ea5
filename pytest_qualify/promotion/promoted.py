"""The promoted run: a full qualification's ``summary.json`` that a post-promotion check is held to.

After the promoted recipe is started behind the router, the live route must serve exactly the
identity that was qualified (seeds/002: "checked exact model identity"). ``--qualify-promoted``
names the full run's ``summary.json``; this room loads it (any problem is a usage error naming the
file), keeps the digests that link the two runs, and compares a live reading with it. No pytest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_qualify.bundle_format.earlier import EarlierRunError, read_earlier, verify_bundle, verify_statement
from pytest_qualify.bundle_format.schema import SCHEMA_ID
from pytest_qualify.promotion.identity import Identity, differences

QUALIFYING_STAGE = "full"


class PromotedError(ValueError):
    """A promoted summary that cannot back a post-promotion check; the message names the file."""


@dataclass(frozen=True)
class Promoted:
    path: str
    run_id: str
    profile: str
    simulated: bool
    identity: Identity  # what the qualified run's endpoint served (its end reading)
    revision: str  # the qualified recipe's revision (the profile's deployment.revision)
    summary_sha256: str
    manifest_sha256: str  # the SHA256SUMS file: the digest of the whole bundle

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "run_id": self.run_id, "profile": self.profile, "simulated": self.simulated,
            "identity": self.identity.as_dict(), "revision": self.revision,
            "summary_sha256": self.summary_sha256, "bundle_sha256sums_sha256": self.manifest_sha256,
        }


def _qualified_identity(summary: dict[str, Any]) -> Identity:
    """The identity the qualified run read at its end, or (a summary written before identities were
    recorded) its ``/v1/models`` entry and ``/version``."""
    recorded = (summary.get("identity") or {}).get("end")
    if isinstance(recorded, dict) and recorded.get("served_name"):
        return Identity.from_dict(recorded)
    from pytest_qualify.promotion.identity import read_identity

    target = summary.get("target") or {}
    served = str(((summary.get("profile") or {}).get("deployment") or {}).get("served_name") or "")
    models = [{"id": m.get("id"), "root": m.get("root"), "max_model_len": m.get("max_model_len")}
              for m in target.get("models") or [] if isinstance(m, dict)]
    return read_identity(served, models, target.get("engine_version"))


def load_promoted(path_text: str) -> Promoted:
    """The promoted run, or :class:`PromotedError`: missing, not JSON, not a summary, not a PASS of
    the full stage, no identity recorded, a bundle whose ``SHA256SUMS`` does not verify, or whose
    in-toto statement disagrees with its files or its summary (``verify_statement``)."""
    path = Path(path_text).expanduser()
    label = f"promoted summary {path}"
    try:
        earlier = read_earlier(path, label, SCHEMA_ID)
    except EarlierRunError as exc:
        raise PromotedError(str(exc)) from None
    summary = earlier.data
    try:
        run_id = str(summary["run"]["id"])
        result = summary["verdict"]["result"]
        profile = summary["profile"]
    except (KeyError, TypeError) as exc:
        raise PromotedError(f"{label}: field {exc} is missing") from None
    # A summary written before stages existed was always the whole protocol.
    stage = (summary.get("stage") or {}).get("name", QUALIFYING_STAGE)
    if stage != QUALIFYING_STAGE:
        raise PromotedError(f"{label}: run {run_id} is the {stage} stage, not a qualification "
                            f"(field 'stage.name' must be {QUALIFYING_STAGE!r})")
    if result != "PASS":
        raise PromotedError(f"{label}: run {run_id} did not pass (field 'verdict.result' is {result!r}); "
                            "only a qualified deployment can be promoted")
    if summary.get("simulated") or (summary.get("target") or {}).get("simulated"):
        raise PromotedError(f"{label}: run {run_id} qualified a SIMULATED endpoint (field 'simulated' is true): a "
                            "simulated run can never back a post-promotion or rollback check")
    identity = _qualified_identity(summary)
    if identity.model_root is None or identity.window_tokens is None:
        raise PromotedError(f"{label}: run {run_id} recorded no served identity ({identity.describe()})")
    try:
        manifest = verify_bundle(earlier, label)
        verify_statement(earlier, label)
    except EarlierRunError as exc:
        raise PromotedError(str(exc)) from None
    return Promoted(
        path=str(path),
        run_id=run_id,
        profile=str(profile.get("name", "")),
        simulated=bool(summary.get("simulated")),
        identity=identity,
        revision=str((profile.get("deployment") or {}).get("revision") or ""),
        summary_sha256=earlier.sha256,
        manifest_sha256=hashlib.sha256(manifest).hexdigest(),
    )


def mismatches(promoted: Promoted, live: Identity, *, live_simulated: bool) -> list[str]:
    """Why the live route does not serve exactly the qualified identity (empty: it does)."""
    where = f"run {promoted.run_id}"
    if live.error:
        return [f"the live route's identity could not be read ({live.error}), so it cannot be matched "
                f"to the identity that {where} qualified"]
    problems = []
    changed = differences(promoted.identity, live)
    # The revision is compared only where the live root shows it (a snapshot path); the qualified
    # side is the recipe's pinned revision when its own root did not show one.
    changed = [c for c in changed if not c.startswith("revision ")]
    qualified_revision = promoted.identity.revision or promoted.revision
    if live.revision and qualified_revision and live.revision != qualified_revision:
        changed.append(f"revision {qualified_revision!r} -> {live.revision!r}")
    if changed:
        problems.append(f"the live route does not serve the identity that {where} qualified ({'; '.join(changed)}): "
                        f"qualified {promoted.identity.describe()}; live {live.describe()}")
    if promoted.simulated and not live_simulated:
        problems.append(f"{where} qualified the SIMULATED reference server; it cannot back a real route")
    return problems
