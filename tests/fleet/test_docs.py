"""docs/fleet.md and the fleet's section of docs/ci.md cannot rot: every ``python -m pytest_qualify
fleet`` / ``fleet-merge`` command they show (the synopsis, the example, the CI jobs' steps) parses with
the command's own arguments, and the ``[fleet]`` table loads as a profile's."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from pytest_qualify.fleet.cli import add_parsers

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS / "fleet.md"


def ci_section() -> str:
    text = (DOCS / "ci.md").read_text()
    start = text.index("## Every replica of a fleet behind a router")
    return text[start:text.index("\n## ", start + 1)]


def commands() -> list[str]:
    text = DOC.read_text() + "\n" + ci_section()
    text = re.sub(r"\\\n\s*", " ", text)  # shell line continuations
    text = re.sub(r"run: >\n((?:\s{10,}.*\n)+)", lambda m: "run: " + " ".join(m.group(1).split()) + "\n", text)
    found = []
    for line in text.splitlines():
        at = line.find("python -m pytest_qualify fleet")
        if at >= 0:
            cmd = line[at:].split(" || ")[0].split("`")[0]
            if " --" in cmd or "fleet-merge " in cmd:  # a command, not the name in prose
                found.append(re.sub(r"\$\{\{[^}]*\}\}", "0", cmd))
    return found


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_qualify", exit_on_error=False)
    add_parsers(p.add_subparsers(dest="command", required=True))
    return p


def test_the_doc_shows_the_commands_a_ci_runs():
    found = commands()
    assert len(found) >= 6 and any("fleet-merge" in c for c in found) and any("--only" in c for c in found)


@pytest.mark.parametrize("command", commands())
def test_every_documented_command_parses(command):
    argv = [a for a in shlex.split(command)[3:] if not set(a) <= set("[].")]
    argv = [a for a in argv if not (a.startswith("[") or a.endswith("]"))]
    argv = [a.replace("ID=URL...", "a=http://x").replace("ID,...", "a,b") for a in argv]
    argv = ["http://x" if a in ("URL", "ID=URL") else a for a in argv]
    argv = ["4" if a == "N" else "small" if a == "PROFILE" else "d" if a in ("DIR", "CHANNEL") else a for a in argv]
    argv = ["direct" if prev == "--channel" and a == "d" else a for prev, a in zip(["", *argv], argv)]
    try:
        parser().parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:  # pragma: no cover - the failure's message
        pytest.fail(f"{command!r} does not parse: {exc}")


def test_the_documented_fleet_table_loads(tmp_path):
    from pytest_qualify.profiles import builtin_profiles, load_profile

    table = re.search(r"```toml\n(\[fleet\].*?)```", DOC.read_text(), re.S).group(1)
    path = tmp_path / "with-fleet.toml"
    path.write_text(Path(builtin_profiles()["small"]).read_text() + "\n" + table)
    fleet = load_profile(str(path)).fleet
    assert fleet is not None and fleet.channel == "vllm-dp" and fleet.replica_ids == ("0", "1", "2", "3")
