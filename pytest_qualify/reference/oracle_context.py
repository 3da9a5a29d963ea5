"""Context retrieval (and the window bracket's prompts): read the document like a perfect reader.

The question after ``</document>`` is matched against the needle templates of
``fixtures/haystack/needles.toml``; the answer is the value the document gives for the question's
key, found in the text itself, written as the question's contract asks: the value alone (in a
little formatting noise, varied across questions so the grader is shown to tolerate it, and the same
for the same request). Faults pick a context lane by the prompt's size, as the server sees
it: the lane whose prompt_tokens are within the profile's tolerance (counted by ``ctx.count_chat``:
the reference tokenizer, or the real vLLM's ``/tokenize`` behind the steering proxy).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from pytest_qualify.tasks.haystack import NeedleTemplate, needle_spec
from pytest_qualify.profiles import Lane, Profile
from pytest_qualify.reference import tokenizer
from pytest_qualify.reference.oracle import ChatRequest, OracleContext, Reply

PRIORITY = 50
# The faults keyed on a context lane: a run with one of them that never picked a lane proved nothing.
LANE_FAULTS = ("drop_needle", "fail_repetition", "timed_answer_differs")
FAULTS = {
    "drop_needle": "=LANE: prompts of that context lane (default: the longest) get a distractor's value",
    "fail_repetition": "=N: the N-th context prompt of each lane (default 2) gets a near miss of the value",
    "timed_answer_differs": "a context-lane prompt asked without streaming gets a near miss of the value its "
                            "streamed (timed, graded) answer gives: the timing phase answers otherwise than the "
                            "functional one",
}
SERVED_FAULTS = {
    "cached_tokens": "context prompts report prefix-cache hits (cached_tokens > 0) despite a fresh cache salt",
}


@dataclass(frozen=True)
class Found:
    template: NeedleTemplate
    key: str
    value: str | None  # None: the document has no needle for the key
    document: str


def read_task(req: ChatRequest) -> Found | None:
    """The needle question in the last user message and the value its document gives."""
    text = req.last_user_text()
    document, marker, question = text.rpartition("</document>")
    if not marker:
        return None
    for template in needle_spec().templates:
        asked = template.question_regex().search(question)
        if asked is None:
            continue
        key = asked.group("key")
        hit = template.needle_regex(key).search(document)
        return Found(template, key, hit.group("value") if hit else None, document)
    return None


def lane_of(prompt_tokens: int, profile: Profile) -> Lane | None:
    """The context lane a prompt of this size was built for, or None (e.g. a window probe)."""
    slack = max(1, profile.limits.lane_tolerance_tokens)
    near = [lane for lane in profile.limits.lanes if abs(lane.prompt_tokens - prompt_tokens) <= slack]
    return min(near, key=lambda lane: abs(lane.prompt_tokens - prompt_tokens)) if near else None


def near_miss(value: str) -> str:
    """The value with its last digit changed: what a careless reader might answer."""
    for i in range(len(value) - 1, -1, -1):
        if value[i].isdigit():
            return value[:i] + str((int(value[i]) + 1) % 10) + value[i + 1 :]
    return value[:-1] + ("A" if value[-1] != "A" else "B")


def _distractor(found: Found) -> str | None:
    for match in found.template.needle_regex().finditer(found.document):
        if match.group("key") != found.key:
            return match.group("value")
    return None


def answer(req: ChatRequest, ctx: OracleContext) -> Reply | None:
    found = read_task(req)
    if found is None:
        return None
    if found.value is None:
        return Reply(content="The document does not say.")
    value = found.value
    faults = ctx.faults
    lane, applied = None, ()
    if any(name in faults for name in LANE_FAULTS):
        count = (ctx.count_chat or tokenizer.count_chat)(req.messages, req.tools or None)
        lane = lane_of(count, ctx.profile) if count is not None else None
    if lane is not None:
        # Counted for every lane prompt, so "the N-th" means the N-th of that lane.
        nth = ctx.occurrence(f"context-lane:{lane.name}")
        longest = max(ctx.profile.limits.lanes, key=lambda x: x.prompt_tokens).name
        if "drop_needle" in faults and lane.name == faults.arg("drop_needle", longest):
            value, applied = _distractor(found) or near_miss(value), ("drop_needle",)
        elif "fail_repetition" in faults and nth == int(faults.number("fail_repetition", 2)):
            value, applied = near_miss(value), ("fail_repetition",)
        elif "timed_answer_differs" in faults and not req.stream:
            # The context module only streams: its grader never sees this answer.
            value, applied = near_miss(value), ("timed_answer_differs",)
    # The whole reply is the value (the question's contract), in the noise capable models add: a
    # style chosen by the question and its document, so the same request is always answered the
    # same way (the integrity module asks a lane's request twice and compares the answers).
    styles = ("{}", "**{}**", "`{}`", "Answer: {}", "{}.")
    style = styles[zlib.crc32(f"{found.key}\x1f{found.document}".encode()) % len(styles)]
    reply = Reply(content=style.format(value), faults=applied)
    for name in applied:
        faults.engage(name)
    if "cached_tokens" in faults:
        faults.engage("cached_tokens")
        # As if the cache ignored the salt and a previous request had the same long prefix.
        reply.cached_tokens = max(16, tokenizer.count(found.document) // 2)
    return reply
