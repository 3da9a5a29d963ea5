"""``python -m pytest_qualify fleet``'s usage errors: exit 4 with one line, before any server starts
or any replica is asked."""

from __future__ import annotations

import pytest

from pytest_qualify.__main__ import main


@pytest.mark.parametrize("args, message", [
    (["--qualify", "small"], "name the fleet"),
    (["--qualify", "no-such-profile", "--replicas", "http://x"], "no-such-profile"),
    (["--qualify", "small", "--endpoint", "reference"], "--replica-count N"),
    (["--qualify", "small", "--endpoint", "reference", "--replica-count", "2", "--replica-fault", "3:degenerate"],
     "I from 1 to 2"),
    (["--qualify", "small", "--replicas", "http://x", "--replica-fault", "1:degenerate"], "needs --endpoint reference"),
    (["--qualify", "small", "--replicas", "a=http://x", "--only", "b"], "--only b: not a named replica"),
    (["--qualify", "small", "--replicas", "http://x", "--promoted", "/nonexistent/summary.json"], "promoted summary"),
])
def test_a_usage_error_is_one_line_and_exit_4(tmp_path, capsys, args, message):
    assert main(["fleet", "--out", str(tmp_path / "out"), *args]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("fleet: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
