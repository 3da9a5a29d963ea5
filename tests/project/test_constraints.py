"""The pinned test environment (.ci/constraints.txt): every package that ``pytest-qualify[test]``
pulls in, one version each, inside every range that asks for it; installed by the README's test
command and .ci/run; pyproject.toml's own ranges stay open (no ``==``) for users."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
INSTALL = "pip install -c .ci/constraints.txt -e '.[test]'"


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[\w.+-]+", version), f"not NAME==VERSION: {line!r}"
        key = canonicalize_name(name)
        assert key not in found, f"{name} pinned twice"
        found[key] = version
    return found


def closure() -> dict[str, list[Requirement]]:
    """Every distribution ``pytest-qualify[test]`` needs, with the requirements that ask for it,
    read from the installed metadata."""
    asked: dict[str, list[Requirement]] = {}
    todo = [(Requirement(r), "test") for r in distribution("pytest-qualify").requires or []]
    seen: set[str] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(req.name)
        asked.setdefault(key, []).append(req)
        for wanted in [""] + sorted(req.extras):
            if (key, wanted) in seen:
                continue
            seen.add((key, wanted))
            try:
                todo += [(Requirement(r), wanted) for r in distribution(req.name).requires or []]
            except PackageNotFoundError:
                raise AssertionError(f"{req.name} is required ({req}) but not installed") from None
    return asked


def test_every_package_of_the_test_environment_is_pinned_once_and_nothing_else():
    needed, pinned = set(closure()), set(pins())
    assert needed == pinned, f"not pinned: {sorted(needed - pinned)}; pinned but not needed: {sorted(pinned - needed)}"


def test_each_pin_is_inside_every_range_that_asks_for_it():
    pinned = pins()
    for key, reqs in closure().items():
        for req in reqs:
            assert req.specifier.contains(pinned[key], prereleases=True), f"{key}=={pinned[key]} is outside {req}"


def test_this_environment_is_the_pinned_one():
    """What ran these tests is what the file says (the README's test command installs it)."""
    pinned = pins()
    differ = {k: (distribution(k).version, v) for k, v in pinned.items() if distribution(k).version != v}
    assert not differ, f"installed differs from .ci/constraints.txt (installed, pinned): {differ}; install with {INSTALL}"


def test_the_plugins_own_ranges_stay_open():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"] + [r for rs in project["optional-dependencies"].values() for r in rs]:
        assert "==" not in spec and "<" not in spec, f"pyproject.toml pins {spec!r}: the pins belong in .ci/constraints.txt"


def test_the_readme_test_command_and_ci_install_the_pinned_file():
    readme = (ROOT / "README.md").read_text()
    test_command = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()[1]
    assert test_command.startswith(INSTALL + " && "), test_command
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()
