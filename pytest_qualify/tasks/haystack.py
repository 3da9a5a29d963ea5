"""Haystack prompts for context retrieval and the window bracket, sized in the *server's* tokens.

Pure code: the filler vocabulary and needle templates are data (``fixtures/haystack/``); the only
contact with a server is the ``count(messages) -> int`` callable the caller passes to
:func:`size_to_tokens` (in the suites, ``/tokenize`` in its messages form). Everything built here is
deterministic in its seed, so a failing haystack can be rebuilt from the recorded seed.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import re
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pytest_qualify.tasks import fixture_data

if TYPE_CHECKING:
    from pytest_qualify.graders.contract import Contract

Messages = list[dict[str, Any]]

VALUE_PATTERNS = {"number": r"[1-9]\d{6}", "code": r"[A-Z]{3}-\d{4}"}
# Letters that cannot be misread as digits (no I, O), so a code's near miss is a real near miss.
CODE_LETTERS = "".join(c for c in string.ascii_uppercase if c not in "IO")


# -- data ----------------------------------------------------------------------------------------


def _fixture(name: str) -> Mapping[str, Any]:
    return fixture_data.haystack(name)


@dataclass(frozen=True)
class NeedleTemplate:
    """One form of needle: ``needle`` hides ``{value}`` under ``{key}``; ``question`` asks for it."""

    id: str
    kind: str  # a key of VALUE_PATTERNS
    needle: str
    question: str
    keys: tuple[str, ...]
    answer: tuple[tuple[str, Any], ...] = ()  # the answer contract's data (needles.toml), {value} unfilled

    def contract(self, value: str) -> "Contract":
        """The answer contract for one target value: its accepted forms filled in, the rules as data."""
        from pytest_qualify.graders.contract import Contract

        raw = dict(self.answer)
        grouped = f"{int(value):,}" if value.isdigit() else value
        fill = {"value": value, "grouped": grouped, "compact": value.replace("-", "")}
        raw["accept"] = list(dict.fromkeys(str(f).format(**fill) for f in raw.get("accept", ["{value}"])))
        return Contract.of({"form": "reply", **raw})

    def needle_text(self, key: str, value: str) -> str:
        return self.needle.format(key=key, value=value)

    def question_text(self, key: str) -> str:
        return self.question.format(key=key)

    def _pattern(self, text: str, key: str | None) -> str:
        key_re = re.escape(key) if key is not None else "(?P<key>" + "|".join(map(re.escape, self.keys)) + ")"
        parts = re.split(r"(\{key\}|\{value\})", text)
        out = []
        for part in parts:
            if part == "{key}":
                out.append(key_re)
            elif part == "{value}":
                out.append(f"(?P<value>{VALUE_PATTERNS[self.kind]})")
            else:
                out.append(re.escape(part))
        return "".join(out)

    def question_regex(self) -> re.Pattern[str]:
        """Matches this template's question and captures its ``key``."""
        return re.compile(self._pattern(self.question, None))

    def needle_regex(self, key: str | None = None) -> re.Pattern[str]:
        """Matches this template's needle sentence (for one key, or any key) and captures ``value``."""
        return re.compile(self._pattern(self.needle, key))


@dataclass(frozen=True)
class NeedleSpec:
    depths: tuple[float, ...]
    distractors: int
    system: str
    intro: str
    paragraph_sentences: int
    templates: tuple[NeedleTemplate, ...]

    def template(self, template_id: str) -> NeedleTemplate:
        for t in self.templates:
            if t.id == template_id:
                return t
        raise KeyError(template_id)


@dataclass(frozen=True)
class FillerSpec:
    patterns: tuple[str, ...]
    words: Mapping[str, tuple[str, ...]]


@cache
def needle_spec() -> NeedleSpec:
    raw = _fixture("needles.toml")
    prompt = raw["prompt"]
    return NeedleSpec(
        depths=tuple(float(d) for d in raw["depths"]),
        distractors=int(raw["distractors"]),
        system=prompt["system"],
        intro=prompt["intro"],
        paragraph_sentences=int(prompt.get("paragraph_sentences", 12)),
        templates=tuple(
            NeedleTemplate(t["id"], t["kind"], t["needle"], t["question"], tuple(t["keys"]),
                           tuple((t.get("answer") or {}).items()))
            for t in raw["template"]
        ),
    )


@cache
def filler_spec() -> FillerSpec:
    raw = _fixture("filler.toml")
    return FillerSpec(tuple(raw["patterns"]), {k: tuple(v) for k, v in raw["words"].items()})


# -- seeds, values, depths -----------------------------------------------------------------------


def haystack_seed(*parts: object) -> str:
    """A stable seed from the run id, lane and repetition: a fresh haystack per repetition and run."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]


def depth_for(lane_index: int, repetition: int, depths: Sequence[float]) -> float:
    """The target depth for a lane and repetition: consecutive repetitions of a lane take
    consecutive depths, and each lane starts further along, so a run sweeps the whole grid."""
    return depths[(lane_index * 3 + repetition - 1) % len(depths)]


def make_value(kind: str, rng: random.Random) -> str:
    if kind == "number":
        return str(rng.randint(1_000_000, 9_999_999))
    if kind == "code":
        return "".join(rng.choice(CODE_LETTERS) for _ in range(3)) + "-" + f"{rng.randint(0, 9999):04d}"
    raise ValueError(f"unknown needle value kind {kind!r}")


def _differs_enough(a: str, b: str) -> bool:
    # Distinct values at least two characters apart: a one-character slip in an answer is then a
    # near miss of exactly one value, never a match of another.
    return len(a) != len(b) or sum(x != y for x, y in zip(a, b)) >= 2


# -- the plan: which needles go where ------------------------------------------------------------


@dataclass(frozen=True)
class Needle:
    key: str
    value: str
    depth: float  # fraction of the haystack's sentences before it
    target: bool


@dataclass(frozen=True)
class HaystackPlan:
    seed: str
    template: NeedleTemplate
    target: Needle
    distractors: tuple[Needle, ...]

    @property
    def needles(self) -> tuple[Needle, ...]:
        return tuple(sorted((self.target, *self.distractors), key=lambda n: n.depth))

    @property
    def question(self) -> str:
        return self.template.question_text(self.target.key)

    @property
    def contract(self) -> "Contract":
        return self.template.contract(self.target.value)

    @property
    def distractor_values(self) -> dict[str, str]:
        return {n.key: n.value for n in self.distractors}


def plan_haystack(seed: str, depth: float, distractors: int | None = None, spec: NeedleSpec | None = None) -> HaystackPlan:
    """Choose a template, the target key and value at ``depth``, and distractors spread elsewhere."""
    spec = spec or needle_spec()
    rng = random.Random(f"plan:{seed}")
    template = rng.choice(spec.templates)
    count = spec.distractors if distractors is None else distractors
    if count + 1 > len(template.keys):
        raise ValueError(f"template {template.id!r} has {len(template.keys)} keys, {count + 1} needed")
    keys = rng.sample(template.keys, count + 1)
    values: list[str] = []
    while len(values) < count + 1:
        v = make_value(template.kind, rng)
        if all(_differs_enough(v, other) for other in values):
            values.append(v)
    # Distractors sit evenly across the haystack, in shuffled key order.
    spots = [(i + 0.5) / count for i in range(count)] if count else []
    rng.shuffle(spots)
    target = Needle(keys[0], values[0], depth, True)
    others = tuple(Needle(k, v, d, False) for k, v, d in zip(keys[1:], values[1:], spots))
    return HaystackPlan(seed, template, target, others)


# -- filler --------------------------------------------------------------------------------------


_SLOT = re.compile(r"\{(\w+)\}")


def _pattern_parts(spec: FillerSpec) -> tuple[tuple[tuple[str, ...], tuple[tuple[str, ...], ...]], ...]:
    """Each filler pattern split at its ``{slot}`` marks: its literal texts, and the word list of
    each slot between them."""
    out = []
    for pattern in spec.patterns:
        pieces = _SLOT.split(pattern)  # literal, slot, literal, slot, …, literal
        out.append((tuple(pieces[0::2]), tuple(spec.words[name] for name in pieces[1::2])))
    return tuple(out)


class FillerStream:
    """Deterministic filler sentences for a seed, generated once and extended on demand.

    The sizing unit is a *piece*: a word or a sentence's full stop. Adding one piece adds about
    one token on any tokenizer, so a prompt can be sized to the exact token (a word-sized unit
    would jump by two tokens wherever a new sentence begins).
    """

    def __init__(self, seed: str, spec: FillerSpec | None = None) -> None:
        self.spec = spec or filler_spec()
        self._rng = random.Random(f"filler:{seed}")
        self._sentences: list[str] = []
        self._pieces: list[int] = [0]  # cumulative: _pieces[i] = pieces in sentences[:i]
        self._parts = _pattern_parts(self.spec)
        self._lock = threading.Lock()  # one stream may be shared (filler_stream): its draws stay in order

    def _extend(self, pieces_needed: int) -> None:
        # A pattern, then its slots' words left to right: the same draws, in the same order, as
        # filling each slot in turn, without a regex pass and a call per slot (a 262K-token prompt
        # is some 25,000 sentences).
        choice, parts = self._rng.choice, self._parts
        sentences, pieces = self._sentences, self._pieces
        while pieces[-1] < pieces_needed:
            literals, slots = choice(parts)
            text = literals[0]
            for words, literal in zip(slots, literals[1:]):
                text += choice(words) + literal
            text = text[0].upper() + text[1:]
            sentences.append(text)
            pieces.append(pieces[-1] + text.count(" ") + 2)  # words + full stop

    def sentences(self, n_pieces: int) -> list[str]:
        """Sentences holding exactly ``n_pieces`` pieces; the last one may stop mid-sentence."""
        if n_pieces <= 0:
            return []
        with self._lock:
            self._extend(n_pieces)
        full = bisect.bisect_right(self._pieces, n_pieces) - 1  # sentences that fit whole
        out = self._sentences[:full]
        rest = n_pieces - self._pieces[full]
        if rest:
            out.append(" ".join(self._sentences[full].rstrip(".").split(" ")[:rest]))
        return out


@lru_cache(maxsize=16)
def filler_stream(seed: str) -> FillerStream:
    """The filler of ``seed`` with the fixtures' spec, shared in the process: a prompt sized once and
    rebuilt from its units in every repetition (the window's edges, a lane's rebuild by another module)
    takes the sentences already drawn for its seed, where a new stream drew a 262K-token prompt's
    filler again for each rebuild (the same sentences: a stream only ever extends)."""
    return FillerStream(seed)


def render_messages(plan: HaystackPlan, sentences: Sequence[str], spec: NeedleSpec | None = None) -> Messages:
    """The chat: a system line, then the document with the needles at sentence boundaries and the
    question after it (the question comes last, as an operator's retrieval prompt would have it)."""
    spec = spec or needle_spec()
    n = len(sentences)
    slots: dict[int, list[str]] = {}
    for needle in plan.needles:
        at = min(n, max(0, round(needle.depth * n)))
        slots.setdefault(at, []).append(plan.template.needle_text(needle.key, needle.value))
    ordered: list[str] = []
    for i in range(n + 1):
        ordered.extend(slots.get(i, ()))
        if i < n:
            ordered.append(sentences[i])
    per = spec.paragraph_sentences
    document = "\n\n".join(" ".join(ordered[i : i + per]) for i in range(0, len(ordered), per))
    user = f"{spec.intro}\n\n<document>\n{document}\n</document>\n\nQuestion: {plan.question}"
    return [{"role": "system", "content": spec.system}, {"role": "user", "content": user}]


@dataclass
class Haystack:
    """A plan plus its filler: ``build(n)`` renders the chat with ``n`` filler pieces."""

    plan: HaystackPlan
    filler: FillerStream = field(init=False)

    def __post_init__(self) -> None:
        self.filler = filler_stream(self.plan.seed)

    def build(self, n_pieces: int) -> Messages:
        return render_messages(self.plan, self.filler.sentences(n_pieces))


# -- sizing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sized:
    """A prompt sized by the server's count: ``units`` filler units make ``tokens`` tokens."""

    units: int
    tokens: int
    calls: int  # how many times ``count`` was called
    messages: Messages = field(repr=False)
    target: int = 0
    pad: int = 0  # one-token pad words after the filler (pad_to_tokens), part of what rebuilds it
    # False: ``tokens`` was computed from the server's learned rate (``tasks/sizing.py``
    # ``Sizer.about``), not counted; the answer's own ``usage.prompt_tokens`` proves it.
    counted: bool = True

    @property
    def exact(self) -> bool:
        return self.tokens == self.target


class SizingError(ValueError):
    """No unit count landed within the tolerance; ``closest`` is the nearest one measured."""

    def __init__(self, message: str, closest: Sized | None) -> None:
        super().__init__(message)
        self.closest = closest


@dataclass
class UnitRate:
    """Tokens per filler unit as one server counts them, learned from every sizing against it: the
    next sizing's first guess, so a prompt the size of the window is found in two ``/tokenize``
    calls rather than four. Only a guess: every size is measured. Held by the object that sizes
    (``tasks/sizing.py`` ``Sizer``, one per run and process), which also remembers each finished
    sizing, so a prompt rebuilt later is the same whatever the rate had learned by then."""

    tokens_per_unit: float | None = None
    overhead: float = 0.0  # tokens at zero units (system line, template, question), once two sizes are known
    _points: list[tuple[int, int]] = field(default_factory=list, repr=False)

    def learn(self, units: int, tokens: int) -> None:
        if units <= 0 or tokens <= 0:
            return
        self._points = sorted({*self._points, (units, tokens)})
        (u0, t0), (u1, t1) = self._points[0], self._points[-1]
        if u1 - u0 >= 1000:  # a line through the smallest and largest prompt measured
            self.tokens_per_unit = (t1 - t0) / (u1 - u0)
            self.overhead = t0 - self.tokens_per_unit * u0
        else:
            self.tokens_per_unit, self.overhead = tokens / units, 0.0

    @property
    def spanned_units(self) -> int:
        """Units between the smallest and the largest prompt learned from (0: fewer than two): how
        far apart the points of the fitted line are."""
        return self._points[-1][0] - self._points[0][0] if len(self._points) > 1 else 0

    def guess(self, target: int) -> int | None:
        if not self.tokens_per_unit or self.tokens_per_unit <= 0:
            return None
        return max(1, round((target - self.overhead) / self.tokens_per_unit))


def size_to_tokens(
    build: Callable[[int], Messages],
    count: Callable[[Messages], int],
    target: int,
    *,
    tolerance: int = 0,
    side: Literal["nearest", "below", "above"] = "nearest",
    max_calls: int = 6,
    units_guess: int | None = None,
    tokens_per_unit: float = 1.2,
    rate: UnitRate | None = None,
) -> Sized:
    """Find a unit count whose prompt counts ``target`` tokens (within ``tolerance``; ``side`` keeps
    it at or below / at or above the target), in a few calls of ``count``.

    Token count grows almost linearly with filler units, so a proportional first step and secant
    steps after it land within a handful of calls even for a 240K-token prompt; once two measured
    unit counts one apart bracket the target, no unit count can hit it and the search stops.
    ``rate``: the server's learned tokens per unit, used for the first guess and updated.
    """
    if target <= 0:
        raise ValueError(f"target must be positive, got {target}")
    seen: dict[int, int] = {}
    built: dict[int, Messages] = {}
    low = target - (0 if side == "above" else tolerance)
    high = target + (0 if side == "below" else tolerance)

    def result(n: int) -> Sized:
        return Sized(n, seen[n], len(seen), built[n], target)

    learned = rate.guess(target) if rate is not None and units_guess is None else None
    slope_known = rate.tokens_per_unit if learned is not None and rate is not None else None
    n = max(1, units_guess if units_guess is not None else learned or round(target / tokens_per_unit))
    while True:
        messages = build(n)
        seen[n] = count(messages)
        built[n] = messages
        if rate is not None:
            rate.learn(n, seen[n])
        if low <= seen[n] <= high:
            return result(n)
        under = [k for k, c in seen.items() if c < target]
        over = [k for k, c in seen.items() if c > target]
        lo = max(under) if under else None
        hi = min(over) if over else None
        if len(seen) >= max_calls or (lo is not None and hi is not None and hi - lo <= 1):
            break
        ref = min(seen, key=lambda k: abs(seen[k] - target))
        if lo is not None and hi is not None:
            slope = (seen[hi] - seen[lo]) / (hi - lo)
        elif len(seen) >= 2:
            a, b = sorted(seen, key=lambda k: abs(seen[k] - target))[:2]
            slope = (seen[a] - seen[b]) / (a - b)
        elif slope_known:
            slope = slope_known  # the server's learned tokens per unit
        else:
            slope = seen[n] / n  # proportional: the fixed overhead is small next to the filler
        if slope <= 0:
            slope = tokens_per_unit
        step = round((target - seen[ref]) / slope)
        if step == 0:
            step = 1 if seen[ref] < target else -1
        nxt = ref + step
        # Stay strictly inside the bracket, and never measure the same unit count twice.
        if lo is not None and nxt <= lo:
            nxt = lo + 1
        if hi is not None and nxt >= hi:
            nxt = hi - 1
        nxt = max(1, nxt)
        if nxt in seen:
            break
        n = nxt
    allowed = [k for k in seen if (side != "below" or seen[k] <= target) and (side != "above" or seen[k] >= target)]
    best = min(allowed or seen, key=lambda k: abs(seen[k] - target))
    raise SizingError(
        f"could not size a prompt to {target} tokens (±{tolerance}, {side}) in {len(seen)} /tokenize calls; "
        f"closest: {seen[best]} tokens with {best} filler units",
        result(best),
    )


# -- the context lanes' prompts ------------------------------------------------------------------

# A 240K-token lane is sized in at most this many /tokenize round trips.
LANE_TOKENIZE_CALLS = 6


def lane_plan(run_id: str, lane_names: Sequence[str], lane: str, repetition: int) -> HaystackPlan:
    """The context module's haystack for a lane and repetition: fresh per run, lane and repetition,
    the target's depth swept across them. One definition, so the integrity module rebuilds exactly
    the request a lane was timed with."""
    seed = haystack_seed(run_id, "context", lane, repetition)
    return plan_haystack(seed, depth_for(list(lane_names).index(lane), repetition, needle_spec().depths))


def size_lane(plan: HaystackPlan, count: Callable[[Messages], int], prompt_tokens: int, tolerance: int,
              rate: UnitRate | None = None) -> Sized:
    """The lane's prompt sized in the server's tokens, the first guess from ``rate`` (learned from
    the sizings before it) where one is given. Half the lane's tolerance: the chat request may count
    a few template tokens more than ``/tokenize``. A guess steers which prompt is found: the
    integrity module's rebuild of the lane goes through the ``Sizer``, which remembers the result."""
    return size_to_tokens(Haystack(plan).build, count, prompt_tokens, tolerance=tolerance // 2,
                          max_calls=LANE_TOKENIZE_CALLS, rate=rate)


# One token in every vocabulary seen (byte-level BPE, SentencePiece), but always measured, never assumed.
PAD_WORD = " the"
DOCUMENT_END = "\n</document>"


def pad_messages(messages: Messages, words: int) -> Messages:
    """The chat with ``words`` pad words at the end of its document (before the question)."""
    if words <= 0:
        return messages
    last = dict(messages[-1])
    text = str(last["content"])
    at = text.rfind(DOCUMENT_END)
    pad = PAD_WORD * words
    last["content"] = text[:at] + pad + text[at:] if at >= 0 else text + pad
    return [*messages[:-1], last]


def pad_to_tokens(
    build: Callable[[int], Messages],
    count: Callable[[Messages], int],
    target: int,
    near: Sized,
    *,
    max_calls: int = 8,
) -> Sized:
    """Hit ``target`` exactly where whole filler pieces cannot: on a tokenizer that splits a filler
    word into several tokens, one piece more jumps past the target. Start from the longest measured
    prompt below the target (``near``, or one piece shorter), and pad its document with one-token
    words until the server counts exactly ``target``.

    The first pad word may cost more than its own token: it splits a token that spanned the
    document's end (Qwen's tokenizer holds ``".\n"`` as one token, so ``"seem restless.\n</document>"``
    gains two tokens from one ``" the"``). Each count corrects the number of words by its miss; where
    the boundary's cost leaves no room (one word already lands past the target), the padding starts
    again from one filler piece fewer. Raises :class:`SizingError` with the closest prompt otherwise."""
    start, calls = near, 0

    def shorter(prompt: Sized) -> Sized:
        nonlocal calls
        units = prompt.units - 1
        messages = build(units)
        calls += 1
        return Sized(units, count(messages), near.calls + calls, messages, target)

    while start.tokens >= target and start.units > 1 and calls < max_calls:
        start = shorter(start)
    best = start
    words = target - start.tokens
    tried: set[tuple[int, int]] = set()
    while calls < max_calls:
        if words <= 0 or (start.units, words) in tried:
            if start.units <= 1:
                break
            start = shorter(start)
            words = target - start.tokens
            continue
        tried.add((start.units, words))
        messages = pad_messages(start.messages, words)
        calls += 1
        tokens = count(messages)
        got = Sized(start.units, tokens, near.calls + calls, messages, target, pad=start.pad + words)
        if tokens == target:
            return got
        if abs(tokens - target) < abs(best.tokens - target):
            best = got
        words += target - tokens
    raise SizingError(
        f"could not size a prompt to exactly {target} tokens: whole filler pieces skip it and padding "
        f"{PAD_WORD!r} words got no closer than {best.tokens} tokens in {near.calls + calls} /tokenize calls",
        best,
    )


def size_exactly(
    build: Callable[[int], Messages],
    count: Callable[[Messages], int],
    target: int,
    *,
    max_calls: int = 10,
    pad_calls: int = 8,
    rate: UnitRate | None = None,
) -> Sized:
    """A prompt of exactly ``target`` tokens: whole filler pieces first (:func:`size_to_tokens`),
    then one-token pad words (:func:`pad_to_tokens`) where the pieces skip the target. Raises
    :class:`SizingError` carrying the closest prompt measured when neither lands on it."""
    try:
        return size_to_tokens(build, count, target, max_calls=max_calls, rate=rate)
    except SizingError as exc:
        if exc.closest is None:
            raise
        return pad_to_tokens(build, count, target, exc.closest, max_calls=pad_calls)
