"""The run's shared state: what every room of the plugin reads and the evidence writers record.

No pytest here (the pytest side keeps it in ``config.stash``, see ``hooks/__init__.py``), so the
evidence writers and the lifecycle can take it typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_qualify.gate import decide as gate_mod
from pytest_qualify.profiles import Profile
from pytest_qualify.redaction import secrets_from_env
from pytest_qualify.settings import Mode, Settings
from pytest_qualify import properties

if TYPE_CHECKING:  # heavy or circular at run time; only for the types
    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.promotion.stage_run import StageRun
    from pytest_qualify.server.info import ServerInfo, Stop
    from pytest_qualify.server.target import Target



@dataclass
class RunState:
    """Everything the plugin knows about this run, in every process (controller and xdist workers)."""

    settings: Settings
    profile: Profile
    run_id: str
    run_dir: Path
    is_worker: bool
    base_url: str | None = None
    target: Target | None = None  # on the controller, once started
    startup_error: str | None = None
    dead: str | None = None  # why the server is gone (first line, then its log tail)
    # What the server said it is, read once as it came up (server/info.py); None when it never answered.
    server_info: ServerInfo | None = None
    # What the engine said of its capacity and start-up, read once after start-up (server/facts.py).
    serving_facts: dict[str, Any] | None = None
    results: dict[str, gate_mod.ItemResult] = field(default_factory=dict)
    verdict: gate_mod.Decision | None = None  # the gate's one decision, once the run has ended
    deselected_modules: set[str] = field(default_factory=set)
    # Protocol items of required modules that a selection (-k, -m, --deselect, --lf, node ids)
    # left out: a partial protocol can never be a PASS.
    user_deselected: int = 0
    partial_selection: str | None = None
    client: QualifyClient | None = None
    # The promotion stage this run is (stages.py): its modules and lanes, the served identity at
    # both ends, the promoted run it is held to. Set with the run state (hooks/stage.py).
    stage_run: StageRun | None = None
    # The run's first step (hooks/steps.py) found the deployment cannot be judged (a rejected key,
    # not an OpenAI-compatible endpoint, no answer) or is not the profile's (a judged FAIL): protocol
    # items outside ``stop.keeps`` are not run, and ``stop.reason`` is the verdict's.
    stop: Stop | None = None
    handover_adopted: bool = False  # an xdist worker has read the controller's server hand-over
    usage_error: bool = False  # the run ended in a usage error before anything started: no bundle
    # The endpoint refused the credentials on chat (the first step's request, or most items): the
    # deployment was not judged, whatever its items show (hooks/results.run_problems).
    credentials_refused: bool = False
    # In this process, the endpoint refused the key on a protocol item: the items after it are not
    # asked (each would only be refused again, a FAILED line apiece); the verdict says why.
    credentials_stop: bool = False
    # The evidence folder did not exist before this run made it: a usage error removes it again.
    made_evidence_dir: bool = False

    @property
    def simulated(self) -> bool:
        """The reference server, or an endpoint that says it is simulated (its /version or
        /v1/models), however it was reached: SIMULATED everywhere, never a promotion."""
        return self.settings.mode == Mode.REFERENCE or (self.server_info is not None and self.server_info.simulated)

    def refused_items(self) -> list[gate_mod.ItemResult]:
        """The protocol items whose request the endpoint refused our key for (on the controller, every
        worker's: the property travels on the reports)."""
        return [r for r in self.results.values() if r.properties.get(properties.CREDENTIALS_REFUSED)]

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values no artifact may contain (the API key's, whatever its variable is called)."""
        return secrets_from_env(self.settings.api_key_env)


def module_of(item_or_def: Any) -> str | None:
    """The protocol module a test item (or its definition) is marked with, or None."""
    marker = item_or_def.get_closest_marker(properties.MODULE)
    return marker.args[0] if marker and marker.args else None
