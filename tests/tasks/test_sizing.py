"""The run's sizer: each distinct prompt counted once, a finished sizing rebuilt rather than searched
again (in this process and by another xdist worker through the run folder's file), the first one
recorded winning, and never a count taken under another tokenizer's identity."""

from __future__ import annotations

import json
import re
import zlib

import pytest

from pytest_qualify.reference import tokenizer
from pytest_qualify.tasks.haystack import Haystack, UnitRate, haystack_seed, lane_plan, pad_to_tokens, plan_haystack, size_lane
from pytest_qualify.tasks.sizing import (
    CALIBRATION_UNITS, SIZING_FILE, Sizer, prompt_digest, refusal_tokens, tokenizer_identity,
)


class Counter:
    """A fake /tokenize that counts its calls (the reference tokenizer, or ``per_word`` a word)."""

    def __init__(self, per_word=None) -> None:
        self.calls = 0
        self.per_word = per_word

    def __call__(self, messages) -> int:
        self.calls += 1
        if self.per_word is None:
            return tokenizer.count_chat(messages)
        return 40 + sum(self.per_word(w) for w in re.findall(r"\S+", "\n".join(m["content"] for m in messages)))


def bpe_like(word: str) -> int:
    return 1 + (zlib.crc32(word.encode()) % 7 == 0) + (len(word) > 9)


ID = tokenizer_identity("http://127.0.0.1:8000", "tiny", "org/tiny", "abc")


def test_a_prompt_is_counted_once_and_its_digest_is_its_text():
    count = Counter()
    sizer = Sizer(count, ID)
    messages = [{"role": "user", "content": "one two three"}]
    first = sizer.count(messages)
    assert sizer.count([dict(m) for m in messages]) == first
    assert (count.calls, sizer.calls, sizer.reused) == (1, 1, 1)
    assert sizer.count([{"role": "user", "content": "one two three four"}]) == first + 1
    assert count.calls == 2
    assert prompt_digest(messages) != prompt_digest([{"role": "system", "content": "one two three"}])


def test_a_lane_is_sized_once_per_run_and_rebuilt_the_same(tmp_path):
    count = Counter(per_word=bpe_like)
    plan = lane_plan("run", ["32K"], "32K", 1)
    sizer = Sizer(count, ID, tmp_path / SIZING_FILE)
    sizer.rate = UnitRate(tokens_per_unit=0.3)  # a skewed guess steers the search, not the rebuild
    first = sizer.lane(plan, 32_768, 256)
    assert first.calls == count.calls > 0 and abs(first.tokens - 32_768) <= 128
    again = sizer.lane(plan, 32_768, 256)
    assert (again.units, again.tokens, again.messages, again.calls) == (first.units, first.tokens, first.messages, 0)
    # Another worker of the same run (its own process, its own rate): the record, no search.
    other = Sizer(Counter(per_word=bpe_like), ID, tmp_path / SIZING_FILE)
    rebuilt = other.lane(plan, 32_768, 256)
    assert (rebuilt.messages, rebuilt.tokens, rebuilt.calls, other.calls) == (first.messages, first.tokens, 0, 0)


def test_the_first_sizing_recorded_wins_when_two_workers_size_at_once(tmp_path):
    plan = lane_plan("run", ["32K"], "32K", 1)
    store = tmp_path / SIZING_FILE
    a, b = Sizer(Counter(per_word=bpe_like), ID, store), Sizer(Counter(per_word=bpe_like), ID, store)
    a.rate = UnitRate(tokens_per_unit=0.3)
    key = f"lane {plan.seed} 32768±256"
    firsts = []

    def b_sizes() -> object:
        # Worker A finishes the same lane while B is still searching, with another first guess.
        firsts.append(a.lane(plan, 32_768, 256))
        return size_lane(plan, b.count, 32_768, 256)

    got = b.sized(key, b_sizes, Haystack(plan).build)
    assert (got.units, got.messages) == (firsts[0].units, firsts[0].messages)
    assert sum(1 for line in store.read_text().splitlines() if "sizing" in json.loads(line)) == 1


def test_another_tokenizer_never_reads_the_counts(tmp_path):
    store = tmp_path / SIZING_FILE
    messages = [{"role": "user", "content": "alpha bravo"}]
    Sizer(Counter(), ID, store).count(messages)
    count = Counter()
    other = Sizer(count, tokenizer_identity("http://127.0.0.1:8000", "tiny", "org/tiny", "def"), store)
    other.count(messages)
    assert count.calls == 1 and other.reused == 0


def test_a_padded_sizing_is_rebuilt_with_its_pad_words(tmp_path):
    # The window's over-window edge: the fitting prompt plus one-token words, one count to verify.
    count = Counter()
    plan = plan_haystack(haystack_seed("run", "window", "fit"), 0.5, distractors=0)
    build = Haystack(plan).build
    sizer = Sizer(count, ID, tmp_path / SIZING_FILE)
    fit = sizer.sized("fit", lambda: size_lane(plan, sizer.count, 4_000, 2), build)
    over = sizer.sized("over", lambda: pad_to_tokens(build, sizer.count, 4_097, fit), build)
    assert over.tokens == 4_097 and over.pad == 4_097 - fit.tokens and over.calls == 1
    rebuilt = Sizer(Counter(), ID, tmp_path / SIZING_FILE).sized("over", lambda: 1 / 0, build)
    assert (rebuilt.messages, rebuilt.tokens, rebuilt.calls) == (over.messages, 4_097, 0)


LANES = {"1K": 1_024, "8K": 8_192, "32K": 32_768}


def _lanes(sizer, repetition):
    return {name: sizer.lane(lane_plan("run", list(LANES), name, repetition), tokens, 256)
            for name, tokens in LANES.items()}


def test_a_lane_counted_in_repetition_1_is_computed_in_repetition_2_and_proven_by_usage(tmp_path):
    count = Counter(per_word=bpe_like)
    sizer = Sizer(count, ID, tmp_path / SIZING_FILE, calibration_units=None)  # the first of a kind searched
    first = _lanes(sizer, 1)
    assert all(s.counted and s.calls >= 1 for s in first.values()) and count.calls == sizer.calls
    calls = count.calls
    second = _lanes(sizer, 2)
    # A fresh haystack per repetition, and not one /tokenize call for it.
    assert count.calls == calls and all(s.calls == 0 and not s.counted for s in second.values())
    for name, sized in second.items():
        assert sized.messages != first[name].messages
        usage = Counter(per_word=bpe_like)(sized.messages)  # what the chat answer's usage.prompt_tokens says
        assert abs(usage - LANES[name]) <= 128, (name, usage, sized.tokens)
        assert sizer.confirm(sized, usage, 256)
    # The integrity module's rebuild of a lane: the same messages, the answer's count, still no call.
    plan = lane_plan("run", list(LANES), "32K", 2)
    rebuilt = sizer.lane(plan, 32_768, 256)
    usage = Counter(per_word=bpe_like)(second["32K"].messages)
    assert (rebuilt.messages, rebuilt.tokens, rebuilt.counted, rebuilt.calls) == (second["32K"].messages, usage, True, 0)
    # Another worker of the run reads the calibration, the computed sizing and its proof from the file.
    other_count = Counter(per_word=bpe_like)
    other = Sizer(other_count, ID, tmp_path / SIZING_FILE, calibration_units=None)
    assert other.lane(plan, 32_768, 256).messages == second["32K"].messages
    third = _lanes(other, 3)
    assert other_count.calls == 0 and not any(s.counted for s in third.values())
    assert count.calls == calls


def test_a_computed_size_its_answer_refutes_is_counted_and_its_kind_never_computed_again():
    count = Counter(per_word=bpe_like)
    sizer = Sizer(count, ID, calibration_units=None)
    _lanes(sizer, 1)
    plan = lane_plan("run", list(LANES), "8K", 2)
    computed = sizer.lane(plan, 8_192, 256)
    assert not computed.counted and count.calls == sizer.calls
    before = count.calls
    # The chat's own count says the learned rate missed this haystack by more than the tolerance.
    assert not sizer.confirm(computed, 8_192 + 300, 256)
    recount = sizer.lane(plan, 8_192, 256, counted=True)
    assert recount.counted and recount.calls >= 1 and count.calls > before
    assert abs(recount.tokens - 8_192) <= 128
    # Its kind is counted from now on; another kind is still computed.
    assert sizer.lane(lane_plan("run", list(LANES), "8K", 3), 8_192, 256).counted
    assert not sizer.lane(lane_plan("run", list(LANES), "1K", 3), 1_024, 256).counted
    # A counted prompt needs no proof, and an answer without usage refutes nothing.
    assert sizer.confirm(recount, 1, 256) and sizer.confirm(computed, None, 256)


def test_a_window_edge_is_never_computed():
    # A refused prompt has no usage: a sizing without a kind is counted, however calibrated the rate.
    count = Counter()
    sizer = Sizer(count, ID)
    for n, label in enumerate(("fit", "fit again")):
        plan = plan_haystack(haystack_seed("run", "window", label), 0.5, distractors=0)
        build = Haystack(plan).build
        sized = sizer.sized(f"window {label}", lambda: size_lane(plan, sizer.count, 4_000, 2, rate=sizer.rate), build)
        assert sized.counted and sized.calls >= 1 and count.calls >= n + 1


# -- the calibration: repetition 1 computes its prompts too ---------------------------------------------


def test_repetition_1_computes_every_lane_from_one_small_calibration_and_its_answers_prove_them(tmp_path):
    count = Counter(per_word=bpe_like)
    sizer = Sizer(count, ID, tmp_path / SIZING_FILE)
    first = _lanes(sizer, 1)
    # Five /tokenize calls in all, each small: the calibration haystack's frame and its pieces, and
    # each lane's own frame.
    assert count.calls == sizer.calls == 2 + len(LANES) and sizer.calibration is not None
    assert sizer.calibration.units == CALIBRATION_UNITS and not any(s.counted for s in first.values())
    for name, sized in first.items():
        usage = Counter(per_word=bpe_like)(sized.messages)  # the chat answer's usage.prompt_tokens
        assert abs(usage - LANES[name]) <= 256, (name, usage, sized.tokens)
        assert sizer.confirm(sized, usage, 256)
    # Proven, each is its kind's anchor: repetition 2 is computed from it, still no call.
    second = _lanes(sizer, 2)
    assert count.calls == 2 + len(LANES) and not any(s.counted for s in second.values())
    for name, sized in second.items():
        assert abs(Counter(per_word=bpe_like)(sized.messages) - LANES[name]) <= 256
    # Another worker reads the calibration from the run's file: no call of its own.
    other_count = Counter(per_word=bpe_like)
    other = Sizer(other_count, ID, tmp_path / SIZING_FILE)
    assert other.calibrate() == sizer.calibration and other_count.calls == 0


def test_a_calibrated_size_its_answer_refutes_is_counted_and_its_kind_computed_from_that_count():
    count = Counter(per_word=bpe_like)
    sizer = Sizer(count, ID)
    plan = lane_plan("run", list(LANES), "8K", 1)
    computed = sizer.lane(plan, 8_192, 256)
    assert not computed.counted
    assert not sizer.confirm(computed, 8_192 + 300, 256)  # the answer's count: off by more than the tolerance
    recount = sizer.lane(plan, 8_192, 256, counted=True)
    assert recount.counted and abs(recount.tokens - 8_192) <= 128
    # The counted one anchors the kind: the next repetition is computed again, from it.
    again = sizer.lane(lane_plan("run", list(LANES), "8K", 2), 8_192, 256)
    assert not again.counted and again.calls == 0


def test_an_exact_prompt_is_computed_over_its_own_frame_and_proven_below_only():
    count = Counter()
    sizer = Sizer(count, ID)
    # Lanes proven first (as the context module runs before the window): their line through other
    # haystacks' frames must not skew an exact prompt.
    for name, sized in _lanes(sizer, 1).items():
        assert sizer.confirm(sized, tokenizer.count_chat(sized.messages), 256)
    plan = plan_haystack(haystack_seed("run", "window", "fit"), 0.5, distractors=0)
    build = Haystack(plan).build
    calls = count.calls
    sized = sizer.about("window fit", "window fit 40000", build, 40_000, lambda: 1 / 0, exact=True)
    # The reference tokenizer counts a token a piece: calibration and frame make it exact, and the
    # frame is its own (one small count).
    assert not sized.counted and count.calls == calls + 1 and tokenizer.count_chat(sized.messages) == 40_000
    assert sizer.confirm(sized, 40_000, 2, below_only=True)
    assert sizer.confirm(sized, 39_998, 2, below_only=True)
    assert not sizer.confirm(sized, 40_001, 2, below_only=True)


def test_a_sizer_without_calibration_searches_the_first_of_a_kind():
    count = Counter()
    sizer = Sizer(count, ID, calibration_units=None)
    assert sizer.calibrate() is None
    assert sizer.lane(lane_plan("run", ["1K"], "1K", 1), 1_024, 256).counted


@pytest.mark.parametrize("message, expected", [
    # vLLM 0.32.0 (and the reference server): a lower bound, window + 1 whatever the prompt's size
    ("This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097 input "
     "tokens, which exceeds this limit even without any output tokens.", (4097, False)),
    # vLLM 0.26.0: window − max_tokens + 1, a lower bound too
    ("This model's maximum context length is 262144 tokens. However, you requested 256 output tokens and your "
     "prompt contains at least 261889 input tokens, for a total of at least 262145 tokens.", (261889, False)),
    # releases that state the prompt's own size
    ("This model's maximum context length is 4096 tokens. However, you requested 4,353 tokens (4,097 in the "
     "messages, 256 in the completion).", (4097, True)),
    ("However, your request has 4097 input tokens.", (4097, True)),
    ("The decoder prompt (length 4097) is longer than the maximum model length of 4096.", (4097, True)),
    ("max_tokens must be at least 1, got 0.", None),
])
def test_the_refusal_states_the_prompts_size_or_a_lower_bound(message, expected):
    assert refusal_tokens(message) == expected


def test_a_frame_of_its_own_and_the_pooled_rate_keep_a_small_lane_within_its_tolerance():
    # A tokenizer whose haystacks' frames differ by far more than the reference's (a long word four
    # tokens): the calibration haystack's frame is 20-31 tokens off these lanes' frames.
    def frames_differ(word: str) -> int:
        return 1 + 3 * (len(word) > 8)

    count = Counter(per_word=frames_differ)
    sizer = Sizer(count, ID)
    for name, target in {"1K": 1_024, "2K": 2_048, "3K": 3_072}.items():
        plan = lane_plan("run", ["1K", "2K", "3K"], name, 1)
        sized = sizer.lane(plan, target, 16)
        usage = Counter(per_word=frames_differ)(sized.messages)
        assert abs(usage - target) <= 16, (name, usage, sized.tokens)
        assert sizer.confirm(sized, usage, 16)
