"""server/death.py: a death confirmed after a refused connection, and the run's one account of it."""

from __future__ import annotations

from pytest_qualify.server.death import DEATH_FILE, WatchedServer, read_account, split_death, write_account
from pytest_qualify.server.lifecycle import free_port


def test_the_first_account_of_a_death_stands_in_every_process(tmp_path):
    assert read_account(tmp_path) is None
    assert write_account(tmp_path, "server died during a: exit 1") == "server died during a: exit 1"
    assert write_account(tmp_path, "server died during b: exit 9") == "server died during a: exit 1"
    assert (tmp_path / DEATH_FILE).read_text() == "server died during a: exit 1"
    assert [p.name for p in tmp_path.iterdir()] == [DEATH_FILE]  # no draft left behind


def test_a_refusing_endpoint_with_no_process_is_gone_and_its_account_has_no_tail(tmp_path):
    server = WatchedServer(f"http://127.0.0.1:{free_port()}")
    how = server.confirm_death()
    assert how is not None and how.startswith("the endpoint no longer accepts connections (")
    assert split_death(server.death_account("t::a", how)) == (f"server died during t::a: {how}", "")
