"""What the test files share: a profile builder, the protocol suite files, and a pytester runner for
``--qualify`` runs. Test files import it (``from .helpers import write_profile``), never
``conftest``: a relative import of the ``tests`` package works under every ``--import-mode``,
including ``importlib``, which puts nothing on ``sys.path``. The fixtures that wrap these helpers
(``profile_file``, ``qualify_pytest``) stay in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify.graders import Verdict
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import builtin_profiles

SMOKE = str(suites_dir() / "test_smoke.py")


def suite(*modules: str) -> list[str]:
    """The protocol suite files of these modules."""
    return [str(suites_dir() / f"test_{m}.py") for m in modules]


def write_profile(
    directory: Path,
    modules: Sequence[str] = ("smoke",),
    *,
    base: str = "small",
    extra_serve: str = "",
    request_s: float | None = None,
    per_1k_prompt_tokens_s: float | None = None,
    lanes: Sequence[tuple[str, int]] | None = None,
    name: str | None = None,
) -> Path:
    """A copy of a built-in profile whose gate needs only ``modules``; optionally other request
    timeouts, other context lanes, or extra ``[serve]`` lines."""
    text = Path(builtin_profiles()[base]).read_text()
    text = text[: text.index("[modules]")] + f"[modules]\nrequired = {json.dumps(list(modules))}\n"
    if request_s is not None:
        text = re.sub(r"(?m)^request_s = .*$", f"request_s = {request_s}", text, count=1)
    if per_1k_prompt_tokens_s is not None:
        text = re.sub(r"(?m)^per_1k_prompt_tokens_s = .*$", f"per_1k_prompt_tokens_s = {per_1k_prompt_tokens_s}", text)
    if lanes is not None:
        text = re.sub(r"(\[\[limits\.lanes\]\]\nname = \"[^\"]+\"\nprompt_tokens = \d+\n\n?)+", "", text)
        text = text.replace(
            "[thinking]", "".join(f'[[limits.lanes]]\nname = "{n}"\nprompt_tokens = {t}\n\n' for n, t in lanes) + "[thinking]"
        )
    if extra_serve:
        text = text.replace("[serve]\n", f"[serve]\n{extra_serve}\n", 1)
    path = directory / (name or f"{base}-test.toml")
    path.write_text(text)
    return path


class QualifyPytest:
    """pytest with ``--qualify`` in a subprocess (pytester), against the reference server unless
    told otherwise; evidence and JUnit land in the pytester directory."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.evidence = pytester.path / "ev"
        self.junit = pytester.path / "junit.xml"

    def __call__(
        self,
        *args: str,
        profile: Path | str | None = None,
        modules: Sequence[str] = ("smoke",),
        endpoint: str | None = "reference",
        faults: Sequence[str] = (),
        repeat: int | None = None,
        suites: Sequence[str] = (SMOKE,),
        timeout: float | None = None,
    ) -> pytest.RunResult:
        argv = [f"--qualify={profile or write_profile(self.pytester.path, modules)}",
                "--qualify-evidence", str(self.evidence), f"--junitxml={self.junit}", "-p", "no:cacheprovider"]
        if endpoint is not None:
            argv += ["--qualify-endpoint", endpoint]
        if repeat is not None:
            argv += ["--repeat", str(repeat)]
        for fault in faults:
            argv += ["--qualify-reference-fault", fault]
        return self.pytester.runpytest_subprocess(*argv, *args, *suites, timeout=timeout)

    def run_dir(self) -> Path:
        """The one run folder under the evidence directory."""
        (found,) = [p for p in self.evidence.iterdir() if p.is_dir()]
        return found

    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir() / "summary.json").read_text())

    def item_properties(self) -> dict[str, dict[str, str]]:
        """Each protocol item's figures by its test name (``test_x[rep1of1-...]``), as text, from
        summary.json: the figures an xunit2 JUnit file no longer carries as testcase properties."""
        return {i["nodeid"].split("::")[-1]: {k: "" if v is None else str(v) for k, v in i["properties"].items()}
                for i in self.summary()["items"]}

    def cases(self) -> dict[str, ET.Element]:
        """pytest's own JUnit test cases by ``classname::name``."""
        root = ET.parse(self.junit).getroot()
        return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


# -- the answer-style corpus (tests/test_answer_styles.py, tests/test_answer_styles_structured.py) --


@dataclass(frozen=True)
class Styles:
    """One module's corpus: ``grade`` is the suite's own grading call over one answer."""

    module: str
    grade: Callable[[Any], Verdict]
    correct: Sequence[Any]
    near_misses: Sequence[tuple[Any, str]]  # (answer, what the reason must say)
    notes: dict[str, str] = field(default_factory=dict)
