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
    (["--qualify", "small", "--router", "http://gw", "--replica-count", "2", "--channel", "llm-d", "--only", "b"],
     "--only needs the replicas named: --channel llm-d learns their ids during the run"),
    (["--qualify", "small", "--replicas", "http://x", "--promoted", "/nonexistent/summary.json"], "promoted summary"),
])
def test_a_usage_error_is_one_line_and_exit_4(tmp_path, capsys, args, message):
    assert main(["fleet", "--out", str(tmp_path / "out"), *args]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("fleet: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def _with_fleet(tmp_path, table: str):
    from ..helpers import write_profile

    path = write_profile(tmp_path, ("smoke",), name="with-fleet")
    path.write_text(path.read_text() + "\n" + table)
    return path


def test_the_profile_names_the_fleet_and_the_command_line_overrides_it(tmp_path):
    import json

    from pytest_qualify.server.lifecycle import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    profile = _with_fleet(tmp_path, f'[fleet]\nreplicas = ["x={dead}"]\nready_timeout_s = 0.3\nreplica_e2e_limit_s = 2\n')
    assert main(["fleet", "--qualify", str(profile), "--out", str(tmp_path / "out")]) == 1
    doc = json.loads((tmp_path / "out" / "fleet.json").read_text())
    assert doc["fleet"]["replicas"] == [{"id": "x", "url": dead, "pin": None}]
    assert doc["fleet"]["ready_timeout_s"] == 0.3 and doc["fleet"]["e2e_limit_s"] == 2.0
    assert doc["decision"]["failing_replicas"] == ["x"]
    assert main(["fleet", "--qualify", str(profile), "--ready-timeout", "0.2", "--replicas", f"y={dead}",
                 "--out", str(tmp_path / "cli")]) == 1
    doc = json.loads((tmp_path / "cli" / "fleet.json").read_text())
    assert [r["id"] for r in doc["fleet"]["replicas"]] == ["y"] and doc["fleet"]["ready_timeout_s"] == 0.2


def test_a_bad_fleet_table_is_a_profile_error(tmp_path, capsys):
    profile = _with_fleet(tmp_path, '[fleet]\nrouter = "http://gw"\nchannel = "carrier-pigeon"\n')
    assert main(["fleet", "--qualify", str(profile), "--out", str(tmp_path / "out")]) == 4
    err = capsys.readouterr().err
    assert "fleet" in err and "channel" in err
