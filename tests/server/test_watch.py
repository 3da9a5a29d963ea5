"""The server watch's classification, in process: which failures are the server's state (a
rejected key, a timeout, a refused connection) and become one readable line, which are the test's
own and propagate unchanged, and how a death's account and its log tail travel."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import openai
import pytest

from pytest_qualify.client.errors import AuthRejected, EndpointError, RequestTimeout, ServerGone
from pytest_qualify.hooks.watch import (
    DEATH_FILE, LOG_SECTION, STARTUP_LOG_SECTION, _attach_log_tail, _harness_reason, fail_if_server_gone, split_death,
)
from pytest_qualify.server.lifecycle import LOG_TAIL_HEADER, free_port, split_startup_error
from pytest_qualify.settings import Settings


def state(tmp_path: Path, base_url: str, **extra: object) -> SimpleNamespace:
    settings = Settings(profile="small", repeat=1, endpoint=base_url, api_key_env="MY_KEY",
                        evidence_dir=tmp_path, serve_command=None, startup_timeout_s=None)
    return SimpleNamespace(settings=settings, base_url=base_url, run_dir=tmp_path, dead=None, target=None,
                           server_info=None, startup_error=None, is_worker=False, secrets=(), **extra)


def item(lane: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(nodeid="suites/test_x.py::test_y[rep1of1]",
                           callspec=SimpleNamespace(params={"lane": lane} if lane else {}))


@pytest.fixture
def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def healthy_url() -> Iterator[str]:
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def chained(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise outer from inner
    except BaseException as exc:
        return exc


def test_a_rejected_key_names_the_variable_not_the_value(tmp_path, closed_url):
    request = httpx.Request("POST", closed_url)
    exc = openai.AuthenticationError("no", response=httpx.Response(401, request=request), body=None)
    reason = _harness_reason(state(tmp_path, closed_url), item(), exc)
    assert reason == "the endpoint rejected the API key (the key is read from $MY_KEY): HTTP 401 (AuthenticationError)"
    own = AuthRejected("/v1/models", None, "MY_KEY")
    assert _harness_reason(state(tmp_path, closed_url), item(), own) == str(own)


@pytest.mark.parametrize("exc, expected", [
    (RequestTimeout("chat completion", 61.0, 60.0, 2048), "2K lane: request timed out: chat completion: no answer after 61.0 s"),
    (httpx.ReadTimeout("slow"), "2K lane: request timed out (ReadTimeout) in a test that used the raw client"),
])
def test_a_timeout_is_one_line_naming_the_lane(tmp_path, closed_url, exc, expected):
    reason = _harness_reason(state(tmp_path, closed_url), item("2K"), exc)
    assert reason is not None and reason.startswith(expected)


def test_a_timeout_inside_another_error_is_still_a_timeout(tmp_path, closed_url):
    exc = chained(RuntimeError("while asking"), RequestTimeout("chat completion", 5.0, 5.0))
    assert _harness_reason(state(tmp_path, closed_url), item(), exc).startswith("request timed out: chat completion")


@pytest.mark.parametrize("exc", [
    AssertionError("answer lacks the needle"),
    EndpointError(400, {"error": {"message": "too long"}}, "HTTP 400"),
    ValueError("bad json"),
])
def test_the_tests_own_failure_is_not_the_servers(tmp_path, closed_url, exc):
    assert _harness_reason(state(tmp_path, closed_url), item(), exc) is None
    assert not (tmp_path / DEATH_FILE).exists()


@pytest.mark.parametrize("exc", [
    ServerGone("connection refused"),
    httpx.ConnectError("refused"),
    ConnectionResetError("reset by peer"),
    chained(RuntimeError("wrapped"), BrokenPipeError("pipe")),
])
def test_a_refused_connection_to_an_endpoint_that_is_gone_declares_it_dead(tmp_path, closed_url, exc):
    st = state(tmp_path, closed_url)
    reason = _harness_reason(st, item(), exc)
    assert reason is not None and reason.startswith("server died during suites/test_x.py::test_y[rep1of1]: "
                                                    "the endpoint no longer accepts connections")
    assert st.dead and (tmp_path / DEATH_FILE).read_text() == st.dead


def test_a_dropped_connection_while_health_answers_is_not_a_death(tmp_path, healthy_url):
    st = state(tmp_path, healthy_url)
    reason = _harness_reason(st, item("1K"), httpx.RemoteProtocolError("peer closed connection"))
    assert reason == "1K lane: connection to the server failed, but it still answers /health: " \
                     "RemoteProtocolError: peer closed connection"
    assert st.dead is None and not (tmp_path / DEATH_FILE).exists()


def test_an_openai_timeout_is_not_mistaken_for_a_refused_connection(tmp_path, closed_url):
    exc = openai.APITimeoutError(request=httpx.Request("POST", closed_url))
    reason = _harness_reason(state(tmp_path, closed_url), item(), exc)
    assert reason == "request timed out (APITimeoutError) in a test that used the raw client"


def test_the_first_account_of_a_death_wins_in_every_process(tmp_path, closed_url):
    (tmp_path / DEATH_FILE).write_text("server died during test_a: exited with code 3")
    st = state(tmp_path, closed_url)
    assert _harness_reason(st, item(), ServerGone("refused")) == "server died during test_a: exited with code 3"


def test_the_log_tail_travels_as_a_report_section_not_in_the_message():
    account = "server died during t: exited with code 3\n--- last 20 lines of the server log ---\nboom\nOOM"
    assert split_death(account) == ("server died during t: exited with code 3", "boom\nOOM")
    assert split_death("server died during t: exited") == ("server died during t: exited", "")

    class Longrepr:
        def __init__(self) -> None:
            self.sections: list[tuple[str, str]] = []

        def addsection(self, name: str, content: str) -> None:
            self.sections.append((name, content))

    report = SimpleNamespace(longrepr=Longrepr())
    _attach_log_tail(report, "boom\nOOM")
    assert report.longrepr.sections == [(LOG_SECTION, "boom\nOOM")]
    plain = SimpleNamespace(longrepr="server died")
    _attach_log_tail(plain, "boom")
    assert plain.longrepr == f"server died\n{LOG_SECTION}\nboom"
    _attach_log_tail(plain, "  ")
    assert plain.longrepr == f"server died\n{LOG_SECTION}\nboom"


def test_a_failed_startup_keeps_its_reason_in_the_message_and_its_log_tail_for_a_section(tmp_path):
    reason = "server exited during startup with exit code 3 after 1.2 s\ncommand: vllm serve m\nlog: /ev/server.log"
    account = f"{reason}\n{LOG_TAIL_HEADER}INFO loading\nCUDA error: no kernel image"
    assert split_startup_error(account) == (reason, "INFO loading\nCUDA error: no kernel image")
    # An endpoint that could not be reached has no log: the whole message is the reason.
    assert split_startup_error("--qualify-endpoint http://h: unreachable") == ("--qualify-endpoint http://h: unreachable", "")
    st = state(tmp_path, "http://127.0.0.1:1")
    st.startup_error = account
    with pytest.raises(pytest.fail.Exception) as failed:
        fail_if_server_gone(None, st, "suites/test_x.py::test_y[rep1of1]")
    # This state attaches (it names an endpoint): nothing was started, so the endpoint could not be reached.
    assert str(failed.value) == f"endpoint could not be reached:\n{reason}"
    report = SimpleNamespace(longrepr="server startup failed:")
    _attach_log_tail(report, split_startup_error(account)[1], STARTUP_LOG_SECTION)
    assert report.longrepr == f"server startup failed:\n{STARTUP_LOG_SECTION}\nINFO loading\nCUDA error: no kernel image"
