"""The media suites end to end (pytester, the reference server) and the media oracle on its own.

Each fault switch of oracle_media must fail exactly the tests that depend on it, with a reason an
operator can read; without faults both modules pass and the per-kind table reads 30/30.
"""

from __future__ import annotations

import re

import pytest

from ..helpers import QualifyPytest
from pytest_qualify.tasks.corpus import load_manifest, malformed_part, media_part, user_message
from pytest_qualify.graders.media import grade_item
from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Rejection
from pytest_qualify.reference import oracle_media

MANIFEST = load_manifest()
MULTIMODAL = str(suites_dir() / "test_multimodal.py")
ADMISSION = str(suites_dir() / "test_media_admission.py")
FAILED_RE = re.compile(r"^FAILED \S+::(\S+)", re.M)


def _run(qualify_pytest: QualifyPytest, *suites: str, repeat: int = 1, faults: tuple[str, ...] = ()) -> pytest.RunResult:
    return qualify_pytest("-rf", modules=("multimodal", "media_admission"), repeat=repeat, faults=faults,
                          suites=suites, timeout=300)


def _failed(result: pytest.RunResult) -> list[str]:
    return sorted(FAILED_RE.findall(result.stdout.str()))


def test_drop_required_word_fails_exactly_that_item(qualify_pytest):
    # Also the clean run of the corpus: the 29 items the fault does not touch pass at --repeat 2.
    result = _run(qualify_pytest, MULTIMODAL, repeat=2, faults=("drop_required_word=video-13",))
    out = result.stdout.str()
    assert result.ret == 1
    assert _failed(result) == ["test_corpus_item[rep1of2-video-13]", "test_corpus_item[rep2of2-video-13]"]
    # One suite file of the profile's modules: the gate's not-judged test case for the rest.
    result.assert_outcomes(passed=58, failed=2, errors=1)
    assert "item video-13: format: JSON does not match the answer schema at the object: 'event' is a required property" in out
    assert re.search(r"^images\s+\| 12/12\s+\| 24/24$", out, re.M)
    assert re.search(r"^mixed\s+\| 4/4\s+\| 8/8$", out, re.M)
    assert re.search(r"^videos\s+\| 13/14\s+\| 26/28$", out, re.M)
    assert re.search(r"^total\s+\| 29/30\s+\| 58/60$", out, re.M)
    assert re.search(r"^Multimodal corpus\s+\| 58/60, 0/2 repetitions\s+FAIL$", out, re.M)
    assert "QUALIFICATION: FAIL" in out


def test_each_admission_fault_fails_exactly_its_checks(qualify_pytest):
    # Three faults that break different checks share one run; each failure carries its own reason.
    # The streaming check grades the manifest's stream item: of the admission module only it
    # depends on that answer, so dropping a field from it fails that check alone.
    item = MANIFEST.stream_item
    result = _run(qualify_pytest, ADMISSION, faults=(f"drop_required_word={item}", "accept_over_limit", "malformed_500"))
    malformed = [f"test_malformed_media_refused[rep1of1-{case.id}]" for case in MANIFEST.malformed]
    over_limit = ["test_over_limit_refused[rep1of1-images]", "test_over_limit_refused[rep1of1-videos]"]
    assert _failed(result) == sorted(["test_streaming_with_video[rep1of1]", *over_limit, *malformed])
    failed = 3 + len(MANIFEST.malformed)
    # 6 + M admission items, and the gate's not-judged test case for the modules this run left out.
    result.assert_outcomes(passed=6 + len(MANIFEST.malformed) - failed, failed=failed, errors=1)
    out = result.stdout.str()
    assert f"streamed: item {item}: format: JSON does not match the answer schema" in out
    assert f"not streamed: item {item}: format: JSON does not match the answer schema" in out
    assert "5 images (limit 4): accepted with HTTP 200; expected an HTTP 400 refusal" in out
    assert "2 videos (limit 1): accepted with HTTP 200; expected an HTTP 400 refusal" in out
    assert "truncated-mp4 (video_url, video/mp4): HTTP 500 (server error) instead of an HTTP 400 refusal" in out
    # The reason says whose behaviour it is, and whether the server survived it.
    assert "upper bound and lower bound inconsistent with step sign" in out
    assert "the engine's own behaviour (engine " in out and "then still serving" in out
    assert "QUALIFICATION: FAIL" in out


# -- the oracle on its own --------------------------------------------------------------------------


def _ctx(*faults: str, profile: str = "262k") -> OracleContext:
    return OracleContext(load_profile(profile), Faults.parse(faults))


def _request(content: list, **extra) -> ChatRequest:
    return ChatRequest({"model": "m", "messages": [{"role": "user", "content": content}], **extra})


def _item_request(item_id: str, prompt: str | None = None, files: tuple[str, ...] | None = None) -> ChatRequest:
    item = MANIFEST.item(item_id)
    return ChatRequest({"model": "m", "messages": user_message(files or item.files, prompt or item.request)})


@pytest.mark.parametrize("case", MANIFEST.malformed, ids=[c.id for c in MANIFEST.malformed])
def test_admit_rejects_malformed_media_by_decoding(case):
    req = _request([malformed_part(case), {"type": "text", "text": "describe"}])
    with pytest.raises(Rejection) as info:
        oracle_media.admit(req, _ctx())
    # vLLM 0.32.0's messages for the same cases (docs/real-vllm.md).
    expected = {
        "invalid-base64": "Non-base64 digit found",
        "truncated-mp4": "Could not open video stream",
        "image-as-video": "Could not open video stream",  # vLLM: HTTP 500, see the fault below
        "zero-byte-image": "Failed to load image: cannot identify image file <_io.BytesIO object>",
        "zero-byte-video": "Could not open video stream",
        "text-as-image": "Failed to load image: cannot identify image file <_io.BytesIO object>",
    }[case.id]
    assert (info.value.status, info.value.message) == (400, expected)
    with pytest.raises(Rejection) as info:
        oracle_media.admit(req, _ctx("malformed_500"))
    assert info.value.status == 500
    assert info.value.message == "upper bound and lower bound inconsistent with step sign"


def test_admit_accepts_every_corpus_item():
    for item in MANIFEST.items:
        oracle_media.admit(_item_request(item.id), _ctx())


@pytest.mark.parametrize("kind, limit", [("image", 4), ("video", 1)])
def test_admit_counts_against_the_profile_limit(kind, limit):
    names = MANIFEST.files_of_kind(kind)[: limit + 1]
    over = _request([media_part(n) for n in names])
    with pytest.raises(Rejection) as info:
        oracle_media.admit(over, _ctx())
    assert (info.value.status, info.value.message, info.value.param) == (
        400, f"At most {limit} {kind}(s) may be provided in one prompt. (parameter={kind})", kind)
    oracle_media.admit(over, _ctx("accept_over_limit"))
    oracle_media.admit(_request([media_part(n) for n in names[:limit]]), _ctx())


def test_answers_pass_their_items_in_every_phrasing():
    ctx = _ctx()
    for item in MANIFEST.items:
        for _ in range(3):  # three repetitions, three phrasings
            reply = oracle_media.answer(_item_request(item.id), ctx)
            verdict = grade_item(item.id, reply.content, item.contract)
            assert verdict.ok, verdict.reason


def test_recognition_needs_the_media_not_just_the_prompt():
    # video-01's question with video-04's file is no corpus item: the oracle does not answer "right".
    reply = oracle_media.answer(_item_request("video-01", files=("video-04.mp4",)), _ctx())
    assert reply.content == "This message carries 0 image(s) and 1 video(s)."


def test_drop_required_word_needs_a_real_item():
    # A mistyped item id must not make the fault vacuous: corpus requests fail, loudly.
    with pytest.raises(Rejection, match="drop_required_word='video-99': not a corpus item id"):
        oracle_media.answer(_item_request("image-01"), _ctx("drop_required_word=video-99"))


def test_drop_required_word_touches_only_its_item():
    ctx = _ctx("drop_required_word=video-13")
    assert "event" not in oracle_media.answer(_item_request("video-13"), ctx).content
    assert "event" in oracle_media.answer(_item_request("video-14"), ctx).content


def test_answers_are_the_contract_not_prose():
    # The question alone (without the contract's instruction) is no corpus request.
    item = MANIFEST.item("image-01")
    assert oracle_media.answer(_item_request("image-01", prompt=item.prompt), _ctx()).content.startswith("This message carries")


def test_tool_case_reply_carries_the_interval():
    tc = MANIFEST.tool_case
    item = MANIFEST.item(tc.item)
    req = ChatRequest({"model": "m", "messages": user_message(item.files, tc.prompt), "tools": [tc.tool]})
    reply = oracle_media.answer(req, _ctx())
    assert reply.tool_calls == [(tc.function["name"], {"event": "alert", "start_s": item.interval_s[0], "end_s": item.interval_s[1]})]


def test_requests_without_media_are_not_answered_here():
    assert oracle_media.answer(_request([{"type": "text", "text": "hi"}]), _ctx()) is None
    oracle_media.admit(_request([{"type": "text", "text": "hi"}]), _ctx())


def test_reference_reports_media_tokens_per_kind_like_vllm():
    from pytest_qualify.reference import tokenizer
    from pytest_qualify.reference.shaping import media_tokens

    images = [media_part(n) for n in MANIFEST.files_of_kind("image")[:2]]
    video = [media_part(MANIFEST.files_of_kind("video")[0])]
    assert media_tokens(_request(images + video + [{"type": "text", "text": "x"}])) == {
        "image": 2 * tokenizer.IMAGE_TOKENS, "video": tokenizer.VIDEO_TOKENS}
    assert media_tokens(_request([{"type": "text", "text": "no media"}])) is None  # vLLM: null
