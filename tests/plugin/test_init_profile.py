"""``python -m pytest_qualify init`` (``init_profile.py``): the probes read what an endpoint says
and nothing else (fakes for each answer an endpoint may give), lanes sized to the window, and end
to end against the reference server: the written profile validates and its probed values equal the
reference server's own profile; launching it stops with the refusal."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_qualify import init_profile
from pytest_qualify.client.errors import EndpointError
from pytest_qualify.engines import parse_engine
from pytest_qualify.promotion.identity import engine_version_of
from pytest_qualify.server.lifecycle import free_port
from pytest_qualify.profiles import load_profile

from ..helpers import reference_server, run_pytest


@pytest.mark.parametrize("window, lanes", [
    (262_144, [("32K", 32768), ("128K", 131072), ("240K", 245760)]),
    (4096, [("1K", 1024), ("2K", 2048), ("3K", 3072)]),
    (32_768, [("4K", 4096), ("16K", 16384), ("30K", 30720)]),
])
def test_lanes_are_sized_to_the_window_as_the_builtin_profiles_are(window, lanes):
    assert init_profile.lanes_for(window, 256) == lanes


def test_a_lane_always_leaves_the_answer_budget_free():
    for name, tokens in init_profile.lanes_for(4096, 1280):
        assert tokens + 1280 <= 4096, name


class FakeEndpoint:
    """Answers chat requests with ``reply(body) -> (status, body)``."""

    def __init__(self, reply) -> None:  # type: ignore[no-untyped-def]
        self.reply = reply
        self.sent: list[Mapping[str, Any]] = []

    def get_json(self, path: str) -> Any:
        raise AssertionError(path)

    def post_json(self, path: str, body: Mapping[str, Any], timeout_s: float | None = None) -> Any:
        self.sent.append(body)
        status, answer = self.reply(body)
        if status != 200:
            raise EndpointError(status, answer, f"HTTP {status}")
        return answer


def _error(message: str) -> dict:
    return {"error": {"message": message, "type": "BadRequestError", "code": 400}}


def _parts(body: Mapping[str, Any]) -> int:
    return sum(1 for p in body["messages"][0]["content"] if p["type"] != "text")


def _ok(content: str = "x", **message: Any) -> dict:
    return {"choices": [{"message": {"content": content, **message}}], "usage": {}}


def test_the_media_limit_is_read_from_the_refusal_that_names_it():
    limit = lambda body: (200, _ok()) if _parts(body) <= 3 else (  # noqa: E731
        400, _error("At most 3 image(s) may be provided in one prompt. (parameter=image)"))
    found = init_profile.probe_media(FakeEndpoint(limit), "m", "image", lambda: {"type": "image_url"})
    assert found.value == 3 and "4 image(s) refused with HTTP 400 'At most 3 image(s)" in found.how


def test_a_model_that_takes_no_images_gets_zero_with_the_servers_words():
    none = lambda body: (400, _error("tiny-qwen3 is not a multimodal model"))  # noqa: E731
    found = init_profile.probe_media(FakeEndpoint(none), "m", "image", lambda: {"type": "image_url"})
    assert found.value == 0 and "not naming a limit" in found.how and "not a multimodal model" in found.how


def test_no_refusal_up_to_the_probe_cap_is_said_not_guessed():
    ep = FakeEndpoint(lambda body: (200, _ok()))
    found = init_profile.probe_media(ep, "m", "video", lambda: {"type": "video_url"}, max_parts=3)
    assert found.value == 3 and "none refused" in found.how and "by hand" in found.how
    assert [_parts(b) for b in ep.sent] == [1, 2, 3]


def test_thinking_probes_tell_a_parser_an_override_and_think_tags_apart():
    def vllm_262k(body):  # a reasoning parser, thinking off by default, the caller can turn it on
        on = (body.get("chat_template_kwargs") or {}).get("enable_thinking")
        return 200, _ok("4", reasoning="thinking..." if on else None)

    split, enabled, overridable = init_profile.probe_thinking(FakeEndpoint(vllm_262k), "m")
    assert (split.value, enabled.value, overridable.value) == (True, False, True)
    assert "enable_thinking=true changed" in overridable.how

    def no_parser(body):  # thinking on, no reasoning parser: the tags land in the content
        return 200, _ok("<think>hm</think>4")

    split, enabled, overridable = init_profile.probe_thinking(FakeEndpoint(no_parser), "m")
    assert (split.value, enabled.value, overridable.value) == (False, True, False)

    split, enabled, overridable = init_profile.probe_thinking(FakeEndpoint(lambda body: (200, _ok("4"))), "m")
    assert (split.value, enabled.value, overridable.value) == (None, False, False)


def test_auto_tool_choice_refused_parsed_or_in_text():
    refused = FakeEndpoint(lambda body: (400, _error(
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')))
    auto, parsed = init_profile.probe_tools(refused, "m")
    assert auto.value is False and "no auto tool choice" in auto.how
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    auto, parsed = init_profile.probe_tools(FakeEndpoint(lambda body: (200, _ok("", tool_calls=[call]))), "m")
    assert auto.value is True and parsed.value is True
    auto, parsed = init_profile.probe_tools(FakeEndpoint(lambda body: (200, _ok('<tool_call>{"name": "x"}</tool_call>'))), "m")
    assert parsed.value is False and "--tool-call-parser" in parsed.how


def test_cached_tokens_reported_or_not():
    hits = iter([0, 512])
    with_details = FakeEndpoint(lambda body: (200, {**_ok(), "usage": {"prompt_tokens_details": {"cached_tokens": next(hits)}}}))
    assert init_profile.probe_cached_tokens(with_details, "m").value is True
    without = FakeEndpoint(lambda body: (200, {**_ok(), "usage": {"prompt_tokens": 9, "prompt_tokens_details": None}}))
    found = init_profile.probe_cached_tokens(without, "m")
    assert found.value is False and "--enable-prompt-tokens-details" in found.how


# -- the load levels: from the admission limit where /metrics shows it ---------------------------

# vLLM 0.32.0's info gauge (docs/real-vllm.md): its CacheConfig, no max_num_seqs.
VLLM_METRICS = ('# TYPE vllm:cache_config_info gauge\n'
                'vllm:cache_config_info{block_size="128",num_gpu_blocks="8192",kv_cache_max_concurrency="256.0"} 1.0\n')
SCHEDULER_METRICS = '# TYPE vllm:scheduler_config_info gauge\nvllm:scheduler_config_info{max_num_seqs="6"} 1.0\n'


class MetricsEndpoint:
    def __init__(self, text: str | None) -> None:
        self.text = text

    def metrics_text(self) -> str:
        if self.text is None:
            raise EndpointError(404, {}, "HTTP 404")
        return self.text


@pytest.mark.parametrize("limit, levels", [(1, [1, 2]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]), (256, [1, 2, 4, 8, 16, 32, 64, 128, 256]),
                                          (10_000, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])])
def test_levels_rise_by_doubling_to_the_admission_limit(limit, levels):
    assert init_profile.load_levels_for(limit) == levels


def test_the_admission_limit_is_read_only_where_metrics_show_it():
    found = init_profile.probe_admission(MetricsEndpoint(SCHEDULER_METRICS))
    assert found == init_profile.Finding(6, "probed: GET /metrics vllm:scheduler_config_info max_num_seqs")
    # vLLM's cache_config_info is no admission limit, though it carries a concurrency figure.
    for text in (VLLM_METRICS, "", None, 'vllm:scheduler_config_info{max_num_seqs="0"} 1\n',
                 'vllm:scheduler_config_info{max_num_seqs="many"} 1\n'):
        found = init_profile.probe_admission(MetricsEndpoint(text))
        assert found.value is None and found.how.startswith("not visible from the endpoint"), (text, found)


def _probed(admission: init_profile.Finding) -> init_profile.Probed:
    F = init_profile.Finding
    return init_profile.Probed(
        endpoint="http://e", served_name=F("m", "probed"), model=F("org/m", "probed"), revision=F(None, "not shown"),
        window_tokens=F(4096, "probed"), engine=F("vllm==0.32.0", "probed"), tokenize=F(True, "probed"),
        images=F(0, "probed"), videos=F(0, "probed"), auto_tools=F(True, "probed"), tool_calls_parsed=F(True, "probed"),
        reasoning_split=F(None, "probed"), thinking_enabled=F(False, "probed"), thinking_overridable=F(False, "probed"),
        cached_tokens=F(True, "probed"), admission=admission)


def test_the_written_levels_rise_to_a_shown_limit_and_say_so_when_it_is_not_shown(tmp_path):
    shown = init_profile.render(_probed(init_profile.Finding(8, "probed: GET /metrics x max_num_seqs")), "p", "now")
    raw = tomllib.loads(shown)
    assert raw["load"]["levels"] == [1, 2, 4, 8] and raw["limits"]["max_num_seqs"] == 8
    assert "# levels: the admission limit was not visible" not in shown
    unseen = init_profile.render(_probed(init_profile.probe_admission(MetricsEndpoint(VLLM_METRICS))), "p", "now")
    raw = tomllib.loads(unseen)
    assert raw["load"]["levels"] == [1, 2, 4] and raw["limits"]["max_num_seqs"] == 1
    [comment] = [line for line in unseen.splitlines() if line.startswith("# levels:")]
    assert "admission limit was not visible" in comment and "--max-num-seqs" in comment
    for text in (shown, unseen):  # each writes a profile that loads
        (tmp_path / "p.toml").write_text(text)
        assert load_profile(str(tmp_path / "p.toml")).load is not None


# -- end to end against the reference server -------------------------------------------------------


@pytest.fixture
def reference(request: pytest.FixtureRequest) -> Iterator[str]:
    """The reference server for the profile named by the test's parameter."""
    yield from reference_server(request.param)


def _init(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_qualify", "init", "--endpoint", url, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("reference", ["262k", "small"], indirect=True)
def test_init_writes_a_valid_profile_equal_to_the_reference_servers_settings(reference, tmp_path, request):
    expected = load_profile(request.node.callspec.params["reference"])
    out = tmp_path / "probed.toml"
    run = _init(reference, out)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"wrote {out} (validated against the profile schema)" in run.stdout
    assert "serve command: not written" in run.stdout and "attach mode" in run.stdout
    got = load_profile(str(out))
    assert got.deployment.served_name == expected.deployment.served_name
    assert got.deployment.model == expected.deployment.model
    assert got.limits.window_tokens == expected.limits.window_tokens
    assert [(lane.name, lane.prompt_tokens) for lane in got.limits.lanes] == \
        [(lane.name, lane.prompt_tokens) for lane in expected.limits.lanes]
    assert got.limits.images_per_request == expected.limits.images_per_request
    assert got.limits.videos_per_request == expected.limits.videos_per_request
    assert (got.thinking.enabled, got.thinking.overridable) == (expected.thinking.enabled, expected.thinking.overridable)
    assert "tools" in got.required_modules
    assert ("multimodal" in got.required_modules) == bool(expected.limits.images_per_request)
    text = out.read_text()
    raw = tomllib.loads(text)
    # What the reference server's /version says: the profile's declared engine version, else its own.
    assert parse_engine(raw["deployment"]["engine"]).version == (engine_version_of(expected) or "0.1.0-reference")
    # Every value line says how it was found.
    for line in text.splitlines():
        if " = " in line and not line.startswith(("#", "name", "prompt_tokens", "description", "required", "command")):
            assert "# probed:" in line or "# default:" in line, line
    assert f"window_tokens = {expected.limits.window_tokens}  # probed: GET /v1/models max_model_len" in text


@pytest.mark.e2e
@pytest.mark.parametrize("reference", ["small"], indirect=True)
def test_the_written_profile_refuses_to_launch_and_says_why(reference, tmp_path):
    out = tmp_path / "probed.toml"
    assert _init(reference, out).returncode == 0
    assert _init(reference, out).returncode == 2  # never overwrites without --force
    run = run_pytest(f"--qualify={out}", "--qualify-evidence", str(tmp_path / "ev"), "-k", "test_health",
                     cwd=tmp_path, timeout=300)
    # A mistake the operator can fix: exit 4 and one line naming the profile, before anything
    # starts (no server, no evidence bundle).
    assert run.returncode == 4, run.stdout + run.stderr
    errors = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and str(out) in errors[0] and "attach" in errors[0], run.stdout + run.stderr
    assert "--qualify-endpoint" in errors[0]
    assert not (tmp_path / "ev").exists() or not any((tmp_path / "ev").iterdir())


def test_an_endpoint_that_does_not_answer_is_an_error_not_a_profile(tmp_path):
    run = _init(f"http://127.0.0.1:{free_port()}", tmp_path / "p.toml", "--timeout", "2")
    assert run.returncode == 1 and "init: http://127.0.0.1:" in run.stderr
    assert not (tmp_path / "p.toml").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("reference", ["small"], indirect=True)
def test_the_written_profile_qualifies_the_endpoint_it_was_probed_from(reference, tmp_path):
    """Every table its required modules need is written (the load module's levels from the
    admission limit), so the starter profile judges the endpoint, not its own gaps."""
    out = tmp_path / "probed.toml"
    assert _init(reference, out).returncode == 0
    got = load_profile(str(out))
    # The small profile's server admits one request at a time, and its /metrics says so: 1, and 2
    # (the load module compares two levels at least).
    assert "load" in got.required_modules and got.load is not None and got.load.levels == (1, 2)
    assert "levels = [1, 2]  # default: one request alone, doubling up to the admission limit (max_num_seqs 1, " \
           "probed)" in out.read_text()
    run = run_pytest(f"--qualify={out}", "--qualify-endpoint", reference, "--qualify-evidence", str(tmp_path / "ev"),
                     "-p", "no:cacheprovider", cwd=tmp_path, timeout=600)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0 and last.startswith("QUALIFICATION: PASS (exit 0)"), run.stdout[-3000:] + run.stderr


def test_init_writes_levels_up_to_the_reference_servers_admission_limit(tmp_path):
    from pytest_qualify.profiles import builtin_profiles

    served = tmp_path / "admits-4.toml"
    served.write_text(Path(builtin_profiles()["small"]).read_text().replace("max_num_seqs = 1\n", "max_num_seqs = 4\n", 1))
    assert load_profile(str(served)).limits.max_num_seqs == 4
    out = tmp_path / "probed.toml"
    for url in reference_server(str(served)):
        run = _init(url, out)
    assert run.returncode == 0, run.stdout + run.stderr
    text = out.read_text()
    assert "max_num_seqs = 4  # probed: GET /metrics vllm:scheduler_config_info max_num_seqs" in text
    got = load_profile(str(out))
    assert got.limits.max_num_seqs == 4 and got.load is not None and got.load.levels == (1, 2, 4)
    assert "# levels: the admission limit was not visible" not in text


def test_a_profile_that_requires_load_without_its_table_is_refused_at_load(tmp_path):
    from pytest_qualify.profiles import ProfileError, builtin_profiles

    text = Path(builtin_profiles()["small"]).read_text()
    start, end = text.index("[load]\n"), text.index("[serve]\n")
    path = tmp_path / "no-load.toml"
    path.write_text(text[:start] + text[end:])
    with pytest.raises(ProfileError, match=r"modules.required names 'load' but the profile has no \[load\] table"):
        load_profile(str(path))
