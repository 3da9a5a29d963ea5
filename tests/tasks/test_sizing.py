"""The run's sizer: each distinct prompt counted once, a finished sizing rebuilt rather than searched
again (in this process and by another xdist worker through the run folder's file), the first one
recorded winning, and never a count taken under another tokenizer's identity."""

from __future__ import annotations

import json
import re
import zlib

from pytest_qualify.reference import tokenizer
from pytest_qualify.tasks.haystack import Haystack, UnitRate, haystack_seed, lane_plan, pad_to_tokens, plan_haystack, size_lane
from pytest_qualify.tasks.sizing import SIZING_FILE, Sizer, prompt_digest, tokenizer_identity


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
