"""The documented compare and ab commands (docs/compare.md, docs/ci.md) parse as written, and the
campaign's order interleaves the arms."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from pytest_qualify.compare.campaign import BootRun, boot_order
from pytest_qualify.compare.cli import add_parsers

DOCS = Path(__file__).resolve().parents[2] / "docs"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_qualify")
    add_parsers(p.add_subparsers(dest="command", required=True))
    return p


@pytest.mark.parametrize("doc", ["compare.md", "ci.md"])
def test_every_documented_command_parses(doc):
    lines = re.findall(r"python -m pytest_qualify ((?:compare|ab) [^\n`]*)", (DOCS / doc).read_text())
    assert lines, doc
    for line in lines:
        args = parser().parse_args(shlex.split(line.split("#")[0]))
        assert args.out


def test_boots_interleave_a_b_b_a():
    assert [f"{arm}{n}" for arm, n in boot_order(3)] == ["A1", "B1", "B2", "A2", "A3", "B3"]
    order = boot_order(4)
    assert sum(arm == "A" for arm, _ in order) == 4 and order[-2:] == [("B", 4), ("A", 4)]


def test_a_boot_finds_its_bundle_beside_other_tools_hidden_folders(tmp_path):
    """pytest-benchmark, where installed, writes .benchmarks into the boot's working folder."""
    (tmp_path / ".benchmarks").mkdir()
    run = BootRun("A", 1, tmp_path, 0, 1.0, "")
    assert run.bundle is None
    (tmp_path / "20261204T000000Z-abcdef").mkdir()
    assert run.bundle == tmp_path / "20261204T000000Z-abcdef"
    (tmp_path / "20261204T000001Z-123456").mkdir()
    assert run.bundle is None  # two bundles: which is this boot's cannot be told


def test_the_eager_recipe_is_the_gpu_recipe_plus_enforce_eager_on_the_same_workload():
    from pytest_qualify.bundle_format.workload import differences
    from pytest_qualify.profiles import load_profile

    base, eager = load_profile("262k-gpu"), load_profile("262k-gpu-eager")
    assert list(eager.serve.args) == [*base.serve.args, "--enforce-eager"]
    assert eager.serve.env == base.serve.env and eager.deployment == base.deployment
    assert differences(base.workload("timing"), eager.workload("timing")) == []
    assert eager.ab == base.ab and "load.c1.engine_tpot_s_mean" in base.ab.figures


def test_the_ab_table_is_validated_and_its_noise_floor_is_relative_to_the_profile(tmp_path):
    from pytest_qualify.profiles import ProfileError, builtin_profiles, load_profile

    text = Path(builtin_profiles()["small"]).read_text()
    good = tmp_path / "p.toml"
    good.write_text(text + '\n[ab]\nfigures = ["load.c1.*"]\ntolerance_pct = 2.5\nnoise_floor = "aa/noise-floor.json"\n')
    ab = load_profile(str(good)).ab
    assert ab.figures == ("load.c1.*",) and ab.tolerance_pct == 2.5 and ab.boots == 3
    assert ab.noise_floor == str(tmp_path / "aa" / "noise-floor.json")
    bad = tmp_path / "bad.toml"
    bad.write_text(text + "\n[ab]\ntolerance_pct = 0\n")
    with pytest.raises(ProfileError, match="ab"):
        load_profile(str(bad))
    bad.write_text(text + "\n[ab]\nboots = 1\n")
    with pytest.raises(ProfileError, match="ab"):
        load_profile(str(bad))


def test_the_task_data_digest_covers_every_request_source_and_names_a_change(tmp_path, monkeypatch):
    """Two runs whose requests were built from other task data are another workload, though every
    item keeps its name; a bundle that predates the digest is compared on the rest."""
    from importlib import resources

    from pytest_qualify.bundle_format import workload

    digest = workload.task_data_sha256()
    assert len(digest) == 64 and digest == workload.task_data_sha256.__wrapped__()
    # A changed fixture changes it: a copy of the fixtures package with one byte more.
    import shutil

    copy = tmp_path / "fixtures"
    shutil.copytree(str(resources.files("pytest_qualify.fixtures")), copy)
    first = next(p for p in sorted(copy.rglob("*.toml")))
    real_files = resources.files

    def files(package):
        return copy if package == "pytest_qualify.fixtures" else real_files(package)

    monkeypatch.setattr(workload.resources, "files", files)
    assert workload.task_data_sha256.__wrapped__() == digest
    first.write_text(first.read_text() + "\n")
    changed = workload.task_data_sha256.__wrapped__()
    assert changed != digest
    base = {"modules": ["smoke"], "items": ["smoke::test_short_answer[q1]"], "task_data": digest}
    (phrase,) = workload.differences(base, {**base, "task_data": changed})
    assert phrase.startswith("task data (the suites, fixtures and media its requests are built from): A sha256 "
                             + digest[:12])
    assert workload.differences(base, {**base, "task_data": None}) == []
