"""Haystack building and sizing: deterministic, needles where planned, sized in few count calls."""

from __future__ import annotations

import re
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_qualify.tasks.haystack import (
    FillerStream,
    Haystack,
    SizingError,
    depth_for,
    haystack_seed,
    lane_plan,
    needle_spec,
    pad_to_tokens,
    plan_haystack,
    render_messages,
    size_lane,
    size_to_tokens,
    UnitRate,
)
from pytest_qualify.reference import tokenizer
from pytest_qualify.reference.oracle import ChatRequest
from pytest_qualify.reference.oracle_context import read_task


class Counter:
    """A fake /tokenize: counts calls; ``per_word`` maps a word to its token count."""

    def __init__(self, per_word=None, overhead: int = 0) -> None:
        self.calls = 0
        self.per_word = per_word
        self.overhead = overhead

    def __call__(self, messages) -> int:
        self.calls += 1
        if self.per_word is None:
            return tokenizer.count_chat(messages)
        text = "\n".join(m["content"] for m in messages)
        return self.overhead + sum(self.per_word(w) for w in re.findall(r"\S+", text))


def bpe_like(word: str) -> int:
    # A subword tokenizer: most words one token, some two or three, punctuation usually glued on.
    return 1 + (zlib.crc32(word.encode()) % 7 == 0) + (len(word) > 9)


def test_240k_lane_is_sized_within_tolerance_in_at_most_six_calls_and_fast():
    count = Counter()
    haystack = Haystack(plan_haystack(haystack_seed("run", "240K", 1), 0.5))
    spent: list[float] = []

    def build(n):
        t0 = time.perf_counter()
        messages = haystack.build(n)
        spent.append(time.perf_counter() - t0)
        return messages

    sized = size_to_tokens(build, count, 245_760, tolerance=128, max_calls=6)
    assert abs(sized.tokens - 245_760) <= 128
    assert sized.tokens == tokenizer.count_chat(sized.messages)
    assert count.calls == sized.calls <= 6
    # Building every candidate prompt (not counting it: that is the server's work) stays fast.
    assert sum(spent) < 3.0, f"building the 240K haystack's candidates took {sum(spent):.1f} s"


@pytest.mark.parametrize("target", [1024, 2048, 3072, 32_768, 131_072])
def test_lanes_with_a_subword_tokenizer_land_in_few_calls(target):
    count = Counter(bpe_like, overhead=40)
    plan = plan_haystack(haystack_seed("run", target, 2), 0.3)
    sized = size_to_tokens(Haystack(plan).build, count, target, tolerance=16, max_calls=6)
    assert abs(sized.tokens - target) <= 16 and count.calls <= 6


@pytest.mark.parametrize("target", [4096 - 256, 4097, 262_144 - 256, 262_145])
def test_window_prompts_are_sized_to_the_exact_token(target):
    plan = plan_haystack(haystack_seed("run", "window", target), 0.5, distractors=0)
    count = Counter()
    sized = size_to_tokens(Haystack(plan).build, count, target, side="below" if target % 2 == 0 else "above", max_calls=10)
    assert sized.exact and sized.tokens == target and count.calls <= 6


def test_unreachable_exact_target_reports_the_closest_on_the_requested_side():
    # Every unit adds two tokens: odd targets cannot be hit.
    def build(n):
        return [{"role": "user", "content": "x" * n}]

    def count(messages):
        return 2 * len(messages[0]["content"])

    with pytest.raises(SizingError) as below:
        size_to_tokens(build, count, 1001, side="below", max_calls=8)
    assert below.value.closest.tokens == 1000
    with pytest.raises(SizingError) as above:
        size_to_tokens(build, count, 1001, side="above", max_calls=8)
    assert above.value.closest.tokens == 1002
    assert "1001 tokens" in str(above.value)


def test_sizing_stops_at_max_calls():
    calls = []

    def count(messages):
        calls.append(1)
        return 10 ** 6 if len(calls) % 2 else 1  # wildly non-monotonic: never converges

    with pytest.raises(SizingError):
        size_to_tokens(lambda n: [{"role": "user", "content": str(n)}], count, 5000, max_calls=4)
    assert len(calls) <= 4


def test_haystack_is_deterministic_per_seed_and_fresh_across_seeds():
    a = Haystack(plan_haystack("seed-a", 0.5)).build(3000)
    b = Haystack(plan_haystack("seed-a", 0.5)).build(3000)
    c = Haystack(plan_haystack("seed-b", 0.5)).build(3000)
    assert a == b
    assert a != c


def test_repetitions_and_runs_get_different_seeds():
    seeds = {haystack_seed(run, "context", lane, rep) for run in ("r1", "r2") for lane in ("1K", "2K") for rep in (1, 2, 3)}
    assert len(seeds) == 12


def test_a_lane_request_rebuilt_is_the_same_request():
    # The integrity module re-asks a lane's timed request by building it again: same run, lane and
    # repetition, same counts, same messages; another repetition is another haystack.
    lanes = ["1K", "2K", "3K"]
    first = size_lane(lane_plan("run-1", lanes, "1K", 2), tokenizer.count_chat, 1024, 32)
    again = size_lane(lane_plan("run-1", lanes, "1K", 2), tokenizer.count_chat, 1024, 32)
    assert first.messages == again.messages and first.calls == again.calls and abs(first.tokens - 1024) <= 16
    plan = lane_plan("run-1", lanes, "2K", 3)
    assert plan.seed == haystack_seed("run-1", "context", "2K", 3)
    assert plan.target.depth == depth_for(1, 3, needle_spec().depths)
    assert lane_plan("run-1", lanes, "1K", 3).seed != lane_plan("run-1", lanes, "1K", 2).seed


def test_depths_are_swept_across_lanes_and_repetitions():
    depths = needle_spec().depths
    seen = {depth_for(lane, rep, depths) for lane in range(3) for rep in (1, 2, 3)}
    assert seen == set(depths)
    assert len({depth_for(0, rep, depths) for rep in (1, 2, 3)}) == 3


def test_needles_are_placed_once_each_at_sentence_boundaries_and_the_question_comes_last():
    plan = plan_haystack(haystack_seed("needles"), 0.7)
    messages = Haystack(plan).build(20_000)
    user = messages[-1]["content"]
    document = user.split("<document>")[1].split("</document>")[0]
    for needle in plan.needles:
        sentence = plan.template.needle_text(needle.key, needle.value)
        assert document.count(sentence) == 1
        at = document.index(sentence)
        assert at == 0 or document[at - 1] in " \n" and document[:at].rstrip().endswith(".")
    target_at = document.index(plan.template.needle_text(plan.target.key, plan.target.value)) / len(document)
    assert abs(target_at - 0.7) < 0.03
    assert user.rstrip().endswith(plan.question)
    assert len(plan.distractors) == needle_spec().distractors
    assert len({n.key for n in plan.needles}) == len(plan.needles)


def test_filler_has_no_digits_and_no_needle_text():
    stream = FillerStream("filler")
    text = " ".join(stream.sentences(50_000))
    assert not re.search(r"\d", text)
    for template in needle_spec().templates:
        assert not template.needle_regex().search(text)
        assert not template.question_regex().search(text)
@given(st.integers(1, 4000))
def test_property_filler_holds_exactly_the_requested_pieces(n):
    sentences = FillerStream("pieces").sentences(n)
    pieces = sum(s.count(" ") + 1 + s.endswith(".") for s in sentences)
    assert pieces == n


@settings(max_examples=25)
@given(st.integers(300, 40_000), st.floats(0.6, 2.5), st.integers(0, 200), st.sampled_from(["nearest", "below", "above"]))
def test_property_sizing_lands_within_tolerance_in_few_calls(target, guess, tolerance, side):
    count = Counter()
    plan = plan_haystack(haystack_seed("prop", target), 0.5)
    sized = size_to_tokens(Haystack(plan).build, count, target, tolerance=tolerance, side=side,
                           tokens_per_unit=guess, max_calls=8)
    assert abs(sized.tokens - target) <= tolerance
    assert (side != "below" or sized.tokens <= target) and (side != "above" or sized.tokens >= target)
    assert count.calls <= 6


@given(st.text(alphabet="0123456789abcdef", min_size=4, max_size=16), st.sampled_from(needle_spec().depths))
def test_property_values_are_distinct_and_never_one_slip_apart(seed, depth):
    plan = plan_haystack(seed, depth)
    values = [n.value for n in plan.needles]
    assert len(set(values)) == len(values)
    for i, a in enumerate(values):
        for b in values[i + 1 :]:
            assert sum(x != y for x, y in zip(a, b)) >= 2
@given(st.text(alphabet="0123456789abcdef", min_size=4, max_size=16), st.sampled_from(needle_spec().depths), st.integers(200, 3000))
def test_property_the_reference_reader_finds_the_target_value(seed, depth, pieces):
    plan = plan_haystack(seed, depth)
    found = read_task(ChatRequest({"messages": render_messages(plan, FillerStream(seed).sentences(pieces))}))
    assert found is not None and found.key == plan.target.key and found.value == plan.target.value


def small_vocabulary(word: str) -> int:
    # Like a tokenizer trained on little text (the tiny CPU test model's): only short common words
    # are one token, every other filler word is four, so one piece more jumps four tokens.
    return 1 if word.strip(".").lower() == "the" else 4


@pytest.mark.parametrize("target,side", [(4097, "above"), (4098, "above"), (4096 - 16, "below"), (4093, "below")])
def test_window_prompts_reach_the_exact_token_with_a_small_vocabulary(target, side):
    plan = plan_haystack(haystack_seed("run", "window", target, side), 0.5, distractors=0)
    count = Counter(small_vocabulary, overhead=30)
    build = Haystack(plan).build
    try:
        sized = size_to_tokens(build, count, target, side=side, max_calls=10)
    except SizingError as exc:
        sized = pad_to_tokens(build, count, target, exc.closest, max_calls=6)
        assert count.calls <= 10 + 6
    assert sized.tokens == target == count(sized.messages)
    user = sized.messages[-1]["content"]
    # The padding sits inside the document; the question still comes last.
    assert user.index("</document>") < user.index("Question:")
    assert sized.messages[0] == build(sized.units)[0]


def test_padding_starts_below_the_target_and_fills_the_gap_with_one_token_words():
    plan = plan_haystack(haystack_seed("run", "window", "pad0"), 0.5, distractors=0)
    count = Counter(small_vocabulary, overhead=30)
    build = Haystack(plan).build
    with pytest.raises(SizingError) as exc:
        size_to_tokens(build, count, 4097, side="above", max_calls=10)
    closest = exc.value.closest
    assert closest.tokens > 4097  # whole pieces skip the target
    sized = pad_to_tokens(build, count, 4097, closest)
    assert sized.units < closest.units and sized.tokens == 4097
    shorter = build(sized.units)[-1]["content"]
    padded = sized.messages[-1]["content"]
    gap = 4097 - count(build(sized.units))
    assert padded == shorter.replace("\n</document>", " the" * gap + "\n</document>")


def test_padding_that_adds_no_token_fails_with_the_closest():
    def build(n):
        return [{"role": "user", "content": "<document>\n" + "word " * n + "\n</document>\n\nQuestion: ?"}]

    def count(messages):  # five tokens a word, and the pad word costs nothing
        return 5 * messages[0]["content"].count("word")

    with pytest.raises(SizingError) as exc:
        size_to_tokens(build, count, 4097, side="above", max_calls=10)
    with pytest.raises(SizingError) as again:
        pad_to_tokens(build, count, 4097, exc.value.closest, max_calls=4)
    assert "exactly 4097 tokens" in str(again.value) and again.value.closest.tokens == 4095


def test_a_learned_rate_finds_the_window_brackets_prompts_in_fewer_calls():
    # The bracket's prompts (exact, one side of the target) after the lanes and the fitting prompt
    # taught the server's rate: fewer /tokenize calls over three runs, each prompt measured to the token.
    cold_calls = warm_calls = 0
    for run in ("run", "r2", "r3"):
        rate, count = UnitRate(), Counter(per_word=bpe_like, overhead=40)
        small = size_lane(lane_plan(run, ["32K", "128K"], "32K", 1), count, 32_768, 256, rate=rate)
        assert abs(rate.tokens_per_unit - small.tokens / small.units) < 0.01
        size_lane(lane_plan(run, ["32K", "128K"], "128K", 1), count, 131_072, 256, rate=rate)
        assert 0 < rate.overhead < 400  # two sizes: the line through them (the fake adds 40, and the template)
        fit = size_to_tokens(Haystack(plan_haystack(haystack_seed(run, "fit"), 0.5)).build, count, 262_144 - 256,
                             side="below", max_calls=10, rate=rate)
        assert fit.exact
        over = Haystack(plan_haystack(haystack_seed(run, "over"), 0.5)).build
        cold = size_to_tokens(over, Counter(per_word=bpe_like, overhead=40), 262_145, side="above", max_calls=10)
        count.calls = 0
        warm = size_to_tokens(over, count, 262_145, side="above", max_calls=10, rate=rate)
        assert cold.exact and warm.exact and count.calls == warm.calls
        cold_calls, warm_calls = cold_calls + cold.calls, warm_calls + warm.calls
    assert warm_calls < cold_calls, (warm_calls, cold_calls)


def test_a_learned_rate_sizes_a_lane_in_fewer_calls_than_a_cold_start():
    # The lanes after the first in a run: the rate's guess lands within half the tolerance at once
    # far more often than the proportional first step does.
    cold = warm = 0
    for run in ("run", "r2", "r3"):
        rate = UnitRate()
        size_lane(lane_plan(run, ["32K", "128K"], "32K", 1), Counter(per_word=bpe_like, overhead=40), 32_768, 256,
                  rate=rate)
        for rep in (1, 2, 3):
            plan = lane_plan(run, ["32K", "128K"], "128K", rep)
            cold += size_lane(plan, Counter(per_word=bpe_like, overhead=40), 131_072, 256).calls
            warm += size_lane(plan, Counter(per_word=bpe_like, overhead=40), 131_072, 256, rate=rate).calls
    assert warm < cold, (warm, cold)


def test_the_filler_draws_each_slot_in_turn_as_a_regex_fill_would():
    """The filler splits its patterns once; its sentences are those of filling each ``{slot}`` in
    turn from the same seeded draws (a regex substitution per sentence)."""
    import random
    import re

    from pytest_qualify.tasks.haystack import FillerStream, filler_spec

    spec = filler_spec()
    for seed in ("lane-240K", "window-rep2", ""):
        rng = random.Random(f"filler:{seed}")
        plain = []
        while len(plain) < 3000:
            text = re.sub(r"\{(\w+)\}", lambda m: rng.choice(spec.words[m.group(1)]), rng.choice(spec.patterns))
            plain.append(text[0].upper() + text[1:])
        stream = FillerStream(seed)
        pieces = sum(s.count(" ") + 2 for s in plain)
        assert stream.sentences(pieces) == plain


def test_haystacks_of_one_seed_share_its_filler_and_build_the_same_prompts():
    from pytest_qualify.tasks.haystack import FillerStream, Haystack, filler_stream, plan_haystack

    plan = plan_haystack("shared-filler-seed", 0.5)
    first, again = Haystack(plan), Haystack(plan)
    assert first.filler is again.filler is filler_stream(plan.seed)
    small, large = first.build(500), again.build(5000)
    # A shared stream extended by a larger build gives the smaller one the same sentences as before,
    # and both equal what a stream of their own draws.
    assert first.build(500) == small and large == Haystack(plan).build(5000)
    alone = FillerStream(plan.seed)
    assert first.filler.sentences(5000) == alone.sentences(5000)
    assert filler_stream("another-seed") is not first.filler
