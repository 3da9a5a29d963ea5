"""One run of one promotion stage: which stage, the served identity at both ends, and the promoted
run it is held to. The plugin fills in the readings; this room turns them into run-level failure
reasons (``evidence/summary.py`` renders its stage, identity and promoted sections). No pytest,
no sockets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pytest_qualify.promotion.identity import DeclaredField, Identity, change_reason
from pytest_qualify.promotion.promoted import Promoted, PromotedError, load_promoted, mismatches
from pytest_qualify.promotion.stages import Stage, select


class StagedProfile(Protocol):
    """What a stage plan reads of a profile (``profiles.Profile`` is one): promotion sits below
    the profiles, so it names the two fields instead of importing the class."""

    @property
    def name(self) -> str: ...

    @property
    def stages(self) -> Sequence[Stage]: ...


class StageUsageError(ValueError):
    """A stage or promoted-run setting that cannot be used; the message starts with the option."""


@dataclass
class StageRun:
    stage: Stage
    promoted: Promoted | None = None
    simulated: bool = False  # the reference server: a SIMULATED qualification may back it
    start: Identity | None = None
    end: Identity | None = None
    changed: str | None = None
    promoted_mismatches: list[str] = field(default_factory=list)
    # The profile's declared fields held to what the run's first step could see (identity.declared_fields).
    declared: list[DeclaredField] = field(default_factory=list)

    def problems_at_end(self) -> list[str]:
        """Run-level failure reasons from the identity readings; call once, after the end reading."""
        out: list[str] = []
        if self.start is None:
            return out  # the server never answered: the startup failure is the reason
        if self.start.error:
            out.append(f"served identity could not be read at the start of the run: {self.start.error}")
        if self.end is not None:
            self.changed = change_reason(self.start, self.end)
            if self.changed:
                out.append(self.changed)
        if self.promoted is not None:
            seen: list[str] = []
            for reading in (self.start, self.end):
                if reading is None:
                    continue
                for reason in mismatches(self.promoted, reading, live_simulated=self.simulated):
                    if reason not in seen:
                        seen.append(reason)
            self.promoted_mismatches = seen
            out += seen
        return out


def plan(profile: StagedProfile, stage_name: str, promoted_path: str | None, *, simulated: bool, load: bool = True,
         key: str | None = None, require_signature: bool = False) -> StageRun:
    """The stage and (``load``: on the controller) the promoted run, or :class:`StageUsageError`.
    ``key``: the public key the promoted bundle's signature must verify against;
    ``require_signature``: the profile backs post-promotion and rollback only with a signed bundle."""
    try:
        stage = select(profile.stages, stage_name)
    except ValueError as exc:
        raise StageUsageError(f"--qualify-stage: profile {profile.name}: {exc}") from None
    promoted = None
    if require_signature and stage.accepts_promoted and not promoted_path:
        # Without a promoted bundle there is no signature to verify: the check would back a route
        # the profile says only a signed qualification may back.
        raise StageUsageError(
            f"--qualify-stage {stage.name}: profile {profile.name} requires a signed promoted bundle ([promotion] "
            "require_signature): name it with --qualify-promoted SUMMARY and its key with --qualify-promoted-key")
    if stage.requires_promoted and not promoted_path:
        raise StageUsageError(
            f"--qualify-stage {stage.name} needs --qualify-promoted SUMMARY: the summary.json of the full run that "
            f"qualified the model this route serves; without it the {stage.name} check cannot tell a qualified "
            "deployment from one nobody qualified")
    if promoted_path:
        if not stage.accepts_promoted:
            accepting = [s.name for s in profile.stages if s.accepts_promoted]
            raise StageUsageError(f"--qualify-promoted applies to the {' and '.join(accepting)} stages only, "
                                  f"not to {stage.name}")
        if load:
            try:
                promoted = load_promoted(promoted_path)
            except PromotedError as exc:
                raise StageUsageError(f"--qualify-promoted: {exc}") from None
            if require_signature and not key:
                raise StageUsageError(f"--qualify-promoted-key: profile {profile.name} requires a signed promoted bundle "
                                      "([promotion] require_signature); name the public key its signature verifies "
                                      "against")
            if key:
                from pytest_qualify.promotion.signature import SignatureError, verify_signature

                try:
                    verify_signature(Path(promoted.path).parent, key)
                except SignatureError as exc:
                    raise StageUsageError(f"--qualify-promoted-key: promoted bundle {Path(promoted.path).parent}: "
                                          f"{exc}") from None
    elif key:
        raise StageUsageError("--qualify-promoted-key applies only with --qualify-promoted")
    return StageRun(stage=stage, promoted=promoted, simulated=simulated)
