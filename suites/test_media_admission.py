"""Protocol module 9, hard part — media admission, malformed media, tools and streaming with video.

- One image (video) over the profile's per-request limit is refused with HTTP 400 naming the
  limit; exactly at the limit the request is answered with visible content.
- Malformed media (bad base64, a truncated MP4, an image declared as video/mp4, zero bytes, text
  declared as PNG) is refused with HTTP 400 — never a 5xx, never a hang — and afterwards the
  server is still serving (:mod:`pytest_qualify.server.liveness`). A 5xx fails with the engine's status
  and message and says it is the engine's behaviour (vLLM 0.32.0 answers 500 to a PNG sent as
  video/mp4: docs/real-vllm.md).
- A tool call made from a video carries the event and its interval read from the video.
- A streamed request with a video passes under the same answer contract as a non-streamed one.
- Exactly at the limit, the whole reply is the number of media sent (the prompt says so).

Unlike the corpus module, nothing here is waivable.
"""

from __future__ import annotations

import itertools

import pytest

from pytest_qualify.server import liveness
from pytest_qualify.checks import fail, held, require
from pytest_qualify.client.errors import EndpointError, error_message, RequestTimeout, ServerGone
from pytest_qualify.tasks.corpus import load_manifest, malformed_part, media_part, user_message
from pytest_qualify.graders import Verdict
from pytest_qualify.graders.media import grade_count, grade_event_call, grade_item, grade_limit_refusal, grade_refusal

pytestmark = pytest.mark.qualify_module("media_admission")

MANIFEST = load_manifest()
KINDS = ("image", "video")


def _limit(profile, kind: str) -> int:
    return profile.limits.images_per_request if kind == "image" else profile.limits.videos_per_request


def _media_message(kind: str, count: int) -> list[dict]:
    """``count`` corpus files of one kind (cycled) and the admission question for that kind."""
    names = list(itertools.islice(itertools.cycle(MANIFEST.files_of_kind(kind)), count))
    parts = [media_part(name) for name in names]
    parts.append({"type": "text", "text": MANIFEST.admission[f"{kind}s_prompt"]})
    return [{"role": "user", "content": parts}]


def _send(client, messages, profile, case: str, **params):
    """(status, error message, answer or None); a timeout or a lost connection fails the test."""
    try:
        answer = client.chat(messages, max_tokens=profile.limits.answer_tokens, temperature=0, **params)
    except EndpointError as exc:
        return exc.status, error_message(exc.body), None
    except RequestTimeout as exc:
        fail(case, f"no answer within the profile's request timeout: {exc}")
    except ServerGone as exc:
        fail(case, f"the server dropped the connection: {exc}")
    return 200, "", answer


def _engine_said(client, verdict: Verdict, status: int | None) -> Verdict:
    """A 5xx is the engine's own answer, not the harness's: the reason says so and names the engine."""
    if verdict.ok or status is None or status < 500:
        return verdict
    try:
        engine = client.version() or "version unknown"
    except Exception as exc:  # the reason must still be written when /version fails too
        engine = f"version unknown: {type(exc).__name__}"
    return verdict.reworded(f"{verdict.reason} — the engine's own behaviour (engine {engine}), not the harness's")


def _refused_then_serving(client, profile, record, case: str, verdict: Verdict) -> None:
    """The refusal's verdict, then liveness (:mod:`pytest_qualify.server.liveness`; the short answer's
    correctness is recorded beside it, not graded). Liveness is checked whatever the refusal was:
    a wrong refusal's reason still says whether the server survived it."""
    live = liveness.check(client, profile, after=f"the {case} request")
    record.props(**live.properties())
    if not verdict.ok:
        fail("", f"{verdict.reason}; then {'still serving' if live.ok else 'NOT serving: ' + live.reason}")
    if not live.ok:
        fail(case, live.reason)
    held(case, "refused, then still serving")


@pytest.mark.parametrize("kind", KINDS, ids=["images", "videos"])
def test_over_limit_refused(qualify_client, qualify_profile, qualify_record, kind):
    limit = _limit(qualify_profile, kind)
    sent = limit + 1
    qualify_record.props(media_kind=kind, media_limit=limit, media_sent=sent)
    status, message, _ = _send(qualify_client, _media_message(kind, sent), qualify_profile, f"{sent} {kind}s")
    qualify_record.props(http_status=status, error_message=message)
    verdict = _engine_said(qualify_client, grade_limit_refusal(status, message, kind=kind, limit=limit, sent=sent), status)
    _refused_then_serving(qualify_client, qualify_profile, qualify_record, f"{sent} {kind}s", verdict)


@pytest.mark.parametrize("kind", KINDS, ids=["images", "videos"])
def test_at_limit_answered(qualify_client, qualify_profile, qualify_record, kind):
    limit = _limit(qualify_profile, kind)
    case = f"{limit} {kind}s (at the limit)"
    qualify_record.props(media_kind=kind, media_limit=limit, media_sent=limit)
    if limit < 1:
        fail(case, f"profile {qualify_profile.name} allows no {kind}s per request: nothing to admit; "
                   "drop media_admission from modules.required or set the limit")
    status, message, answer = _send(qualify_client, _media_message(kind, limit), qualify_profile, case)
    qualify_record.props(http_status=status)
    if answer is None:
        fail(case, f"refused with HTTP {status}: {message}; expected HTTP 200 with an answer")
    media_tokens = ((answer.usage.get("prompt_tokens_details") or {}).get("multimodal_tokens") or {}).get(kind)
    if media_tokens:
        qualify_record.props(**{f"prompt_tokens_per_{kind}": round(media_tokens / limit, 1)})
    qualify_record.answer(answer)
    require(grade_count(answer.content, limit), f"{case}: the reply must be the number of {kind}s ({limit})")


@pytest.mark.parametrize("case", MANIFEST.malformed, ids=[c.id for c in MANIFEST.malformed])
def test_malformed_media_refused(qualify_client, qualify_profile, qualify_record, case):
    messages = [{"role": "user", "content": [malformed_part(case), {"type": "text", "text": MANIFEST.admission["malformed_prompt"]}]}]
    status, message, _ = _send(qualify_client, messages, qualify_profile, case.id)
    qualify_record.props(http_status=status, error_message=message, media_part=case.part, media_mime=case.mime)
    verdict = _engine_said(qualify_client, grade_refusal(status, message, case=f"{case.id} ({case.part}, {case.mime})"), status)
    _refused_then_serving(qualify_client, qualify_profile, qualify_record, case.id, verdict)


def test_tool_call_from_video(qualify_ask, qualify_record):
    tool = MANIFEST.tool_case
    item = MANIFEST.item(tool.item)
    qualify_record.props(corpus_item=item.id)
    answer = qualify_ask(user_message(item.files, tool.prompt), tool_turn=True, tools=[tool.tool], tool_choice="auto")
    qualify_record.props(tool_calls=";".join(f"{c.name}({c.arguments})" for c in answer.tool_calls))
    require(grade_event_call(
        [(c.name, c.arguments) for c in answer.tool_calls], function=tool.function, event=tool.event,
        interval_s=item.interval_s, tolerance_s=tool.tolerance_s,
    ), f"item {item.id} with tool {tool.function['name']}")


def test_streaming_with_video(qualify_ask, qualify_record):
    item = MANIFEST.item(MANIFEST.stream_item)
    qualify_record.props(corpus_item=item.id)
    verdicts: list[Verdict] = []
    for stream in (True, False):
        # The streamed answer's TTFT is the one kept.
        answer = qualify_ask(user_message(item.files, item.request), stream=stream,
                             salt_suffix="-stream" if stream else "-whole")
        verdict = grade_item(item.id, answer.content, item.contract, finish_reason=answer.finish_reason)
        verdicts.append(verdict.reworded(("streamed: " if stream else "not streamed: ") + verdict.reason))
    failed = [v.reason for v in verdicts if not v.ok]
    if failed:
        fail("", "; ".join(failed))
    held(f"item {item.id}", "streamed and not streamed")
