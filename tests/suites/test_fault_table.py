"""The self-test's fault table (``pytest_qualify/selftest/selftest.toml``) drives the fault runs: every row
that names a module is run end to end against the reference server. The files beside this one run
most rows in runs of their own, holding each fault to its exact items and reasons (several faults of
different modules share a run there: a run costs seconds on a 2-core machine); every other row is
run here, one run per row, parametrised from the table: the fault on, its module's suite, one
repetition. The run FAILs (exit 1), the server's record shows the fault engaged, and every failed item
is the module's own; a run-level fault (the identity changing under the run) fails with its row's
reason instead. So a row added to the table is a run without a line of test code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_qualify.selftest.engine import fault_table

from ..helpers import QualifyPytest, junit_failures, suite, write_profile

TABLE = {name: row for name, row in fault_table().items() if row.module}


def run_beside() -> set[str]:
    """The rows the other suite files name as a fault (``"name"`` or ``"name=arg"``)."""
    text = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py") if p.name != Path(__file__).name)
    return set(re.findall(r'"(\w+)(?:=[^"]*)?"', text)) & set(TABLE)


HERE = sorted(set(TABLE) - run_beside())


def test_every_row_with_a_module_is_run_somewhere():
    beside = run_beside()
    assert beside | set(HERE) == set(TABLE) and not beside & set(HERE)
    assert HERE, "every row is run beside: this file's runs would select nothing"


@pytest.mark.parametrize("name", HERE)
def test_the_fault_fails_its_own_module(qualify_pytest: QualifyPytest, name):
    row = TABLE[name]
    profile = write_profile(qualify_pytest.pytester.path, (row.module,))
    result = qualify_pytest(profile=profile, faults=(row.spec,), repeat=1, suites=suite(row.module))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert "QUALIFICATION: FAIL" in out
    # The failure is the fault's: the reference server recorded it engaged.
    assert {f["name"]: f["engaged"] for f in qualify_pytest.summary()["faults"]["armed"]} == {name: True}
    if row.reason:
        reasons = json.dumps(qualify_pytest.summary()["verdict"])
        assert row.reason in reasons, reasons
        return
    failed = junit_failures(qualify_pytest.junit)
    assert failed, f"{row.spec}: no item failed"
    cases = {name.rsplit("::", 1)[-1]: case for name, case in qualify_pytest.cases().items()}
    for item in failed:
        if cases[item].get("classname") == "qualify.gate":
            continue  # the gate's own test case for a run-level reason (the identity stop)
        assert f"test_{row.module}" in cases[item].get("classname", ""), f"{row.spec} failed {item}, not a {row.module} item"
