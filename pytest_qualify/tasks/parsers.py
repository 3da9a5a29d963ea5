"""The parsers module's cases (``fixtures/parsers/``) and the forced requests that ask them.

A case is what the model's parsers must hand the client: tool calls (name and arguments), the
visible content, the reasoning. :func:`model_text` writes it as the model itself writes it in the
served syntax (the chat template's form, which the engine's ``--tool-call-parser`` and
``--reasoning-parser`` of the same name read back), and :func:`forced_body` asks the engine to
generate exactly that text with its own structured outputs (``structured_outputs``: a one-item
``choice``, or an escaped ``regex`` for text with line breaks). So any vLLM deployment can be made
to emit a known answer, and what comes back measures the parsers between the model and the client.

The parsers read some markers by token id (``<think>``, ``</think>``, ``<tool_call>``): a forced
text spelt in other tokens (``<`` ``think`` ``>``) would measure the forcing, not the parser. The
forced request biases each marker's own id (``logit_bias``, read from the deployment's
``/tokenize``), so wherever the constraint allows a marker the engine takes the model's own token,
and asks for the generated ids back (``return_token_ids``) so the check can prove it.

The corpus is generated once (``tasks/parsers_corpus.py``, hypothesis strategies, seeded) and stored;
this file only reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

CORPUS_FILE = "parsers/corpus.jsonl"
EXTRA_TOOLS_FILE = "parsers/tools.json"
SYNTAXES = ("qwen3_coder", "hermes")
KINDS = ("call", "parallel", "after_content", "after_reasoning", "long_string", "reasoning", "held")
# The markers the parsers read by token id where the tokenizer has them as one token.
MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
# The text every marker of the served syntaxes is made of: a value holding one is no longer the
# value the syntax can carry (the corpus never draws one; see tasks/parsers_corpus.py).
TERMINALS = ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
             "<think>", "</think>", "<|im_start|>", "<|im_end|>", "<|endoftext|>")
# logit_bias's largest value (vLLM clamps to OpenAI's range): a marker the grammar allows wins.
MARKER_BIAS = 100
# The forced text's own tokens (its tokenizer's encoding, /tokenize): below the markers, above any
# other token the grammar allows. A model writes its text in its tokenizer's tokens; a random model
# under a text grammar picks any spelling and took about 1.7 times as many (docs/real-vllm.md).
TEXT_BIAS = 50
# A forced case's stream may be silent while the parser holds what it has (a 10,000-character
# argument held to its end took over 30 s on two CPU cores): the limit is the profile's request
# budget, which stays the deadline (client.endpoint), not the profile's idle limit.
STREAM_HELD_IDLE_S = float("inf")
# How many cases of each kind the sample run in the full stage asks (the parsers stage asks all).
SAMPLE_PER_KIND = {"call": 12, "parallel": 4, "after_content": 4, "after_reasoning": 4, "long_string": 0,
                   "reasoning": 6, "held": 10}


class ParserCaseError(ValueError):
    """A stored case contradicts itself (the message names the case)."""


@dataclass(frozen=True)
class Call:
    name: str
    arguments: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class ParserCase:
    """One forced answer and what the parsers must make of it."""

    id: str
    kind: str  # one of KINDS
    note: str  # what the case exercises, in words
    calls: tuple[Call, ...] = ()
    content: str | None = None  # the visible content (before the calls, on a tool turn)
    reasoning: str | None = None

    @property
    def tool_turn(self) -> bool:
        return bool(self.calls)

    @property
    def thinking(self) -> bool:
        """The case needs the reasoning parser on this request (thinking on)."""
        return self.reasoning is not None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "note": self.note}
        if self.calls:
            out["calls"] = [c.as_dict() for c in self.calls]
        if self.content is not None:
            out["content"] = self.content
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning
        return out

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> "ParserCase":
        where = f"parsers case {raw.get('id')!r}"
        if raw.get("kind") not in KINDS:
            raise ParserCaseError(f"{where}: kind {raw.get('kind')!r} is not one of {', '.join(KINDS)}")
        calls = tuple(Call(str(c["name"]), dict(c["arguments"])) for c in raw.get("calls") or ())
        case = cls(str(raw["id"]), str(raw["kind"]), str(raw.get("note", "")), calls, raw.get("content"),
                   raw.get("reasoning"))
        for text in _strings(case):
            for terminal in TERMINALS:
                if terminal in text:
                    raise ParserCaseError(f"{where}: a value holds the syntax's own {terminal!r}")
        if not case.calls and not case.content and case.reasoning is None:
            raise ParserCaseError(f"{where}: nothing to force (no call, content or reasoning)")
        return case


def _strings(case: ParserCase) -> list[str]:
    out = [t for t in (case.content, case.reasoning) if t]

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                out.append(str(key))
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for call in case.calls:
        walk(dict(call.arguments))
    return out


# -- the model's own text ----------------------------------------------------------------------------


def _qwen3_coder_value(value: Any) -> str:
    # vLLM's qwen3_coder parser takes a parameter's text as written where the tool schema says
    # string, and reads anything else as JSON (by the schema's type).
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_tool_calls(calls: Sequence[tuple[str, Any]], syntax: str) -> str:
    """The model's own text for these calls, as the served chat template renders an assistant's
    calls and vLLM's ``--tool-call-parser`` of the same name reads them back."""
    blocks = []
    for name, args in calls:
        arguments = json.loads(args) if isinstance(args, str) else args
        if not isinstance(arguments, Mapping):
            raise ValueError(f"tool-call arguments must be a JSON object, got {arguments!r:.80}")
        if syntax == "qwen3_coder":
            params = "".join(f"<parameter={key}>\n{_qwen3_coder_value(value)}\n</parameter>\n"
                             for key, value in arguments.items())
            blocks.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
        elif syntax == "hermes":
            body = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
            blocks.append(f"<tool_call>\n{body}\n</tool_call>")
        else:
            raise ValueError(f"unknown tool-call syntax {syntax!r} (expected one of {', '.join(SYNTAXES)})")
    return "\n".join(blocks)


def model_text(case: ParserCase, syntax: str) -> str:
    """The exact text the model generates for ``case`` in the served syntax: the Qwen3 template's
    ``<think>\\n…\\n</think>\\n\\n`` before the answer when it reasons, the content, then the calls
    after a line break."""
    text = ""
    if case.reasoning is not None:
        text += f"<think>\n{case.reasoning}\n</think>\n\n"
    calls = render_tool_calls([(c.name, c.arguments) for c in case.calls], syntax) if case.calls else ""
    if case.content and calls:
        text += f"{case.content}\n{calls}"
    else:
        text += case.content or calls
    return text


def regex_escape(text: str) -> str:
    """``text`` as a regular expression that matches exactly it, in the syntax vLLM's structured
    output backends read: metacharacters escaped with a backslash, control characters as ``\\n``,
    ``\\t``, ``\\r`` or ``\\xHH`` (a raw newline in a pattern is not portable)."""
    out = []
    for ch in text:
        if ch in "\\^$.|?*+()[]{}/":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def text_constraint(text: str) -> dict[str, Any]:
    """The ``structured_outputs`` value that allows exactly ``text``: a one-item choice for a single
    line, an escaped regex for anything with line breaks or control characters."""
    if not text:
        raise ValueError("an empty answer cannot be forced (a grammar needs at least one token)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        return {"regex": regex_escape(text)}
    return {"choice": [text]}


def forced_text(constraint: Mapping[str, Any]) -> str | None:
    """The one text a constraint of :func:`text_constraint` allows, or None for any other constraint
    (the reference server generates exactly it; the fault switches change it)."""
    choice = constraint.get("choice")
    if isinstance(choice, list) and len(choice) == 1 and isinstance(choice[0], str):
        return choice[0]
    pattern = constraint.get("regex")
    if not isinstance(pattern, str):
        return None
    out, i = [], 0
    escapes = {"n": "\n", "t": "\t", "r": "\r"}
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "x" and i + 3 < len(pattern):
                out.append(chr(int(pattern[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(escapes.get(nxt, nxt))
            i += 2
            continue
        if ch in "^$.|?*+()[]{}":
            return None  # a pattern that allows more than one text
        out.append(ch)
        i += 1
    return "".join(out)


# -- the request ---------------------------------------------------------------------------------------


PROMPT_PREFIX = "Parser conformance case "


def case_prompt(case: ParserCase) -> str:
    return f"{PROMPT_PREFIX}{case.id}. Reply with the forced answer."


def forced_body(case: ParserCase, syntax: str, tools: Sequence[Mapping[str, Any]],
                marker_ids: Mapping[str, int], *, thinking_off: bool = False,
                text_ids: Sequence[int] = ()) -> dict[str, Any]:
    """The request fields (beside model, temperature, seed and stream, which the asker sets) that
    make the engine generate :func:`model_text`: the constraint, the markers' own ids biased most and
    the text's own ids (``text_ids``, its tokenizer's encoding) less, the generated ids asked back, a
    token budget no spelling of the text can pass (a token is at least one byte), and thinking
    switched on for a case that reasons (off for the others where ``thinking_off``: a deployment that
    thinks by default)."""
    text = model_text(case, syntax)
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": case_prompt(case)}],
        "tools": [dict(t) for t in tools],
        "tool_choice": "auto",
        "structured_outputs": text_constraint(text),
        "max_tokens": len(text.encode("utf-8")) + 8,
        "return_token_ids": True,
    }
    bias = {int(i): TEXT_BIAS for i in text_ids}
    bias.update({int(i): MARKER_BIAS for i in marker_ids.values()})
    if bias:
        body["logit_bias"] = {str(i): bias[i] for i in sorted(bias)}
    if case.thinking:
        body["chat_template_kwargs"] = {"enable_thinking": True}
    elif thinking_off:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    return body


def marker_ids(tokenize: Callable[[str], Sequence[int]]) -> dict[str, int]:
    """The markers the served tokenizer holds as one token each, with their ids (``tokenize``: a text's
    ids, no special tokens added)."""
    found = {}
    for marker in MARKERS:
        ids = tokenize(marker)
        if len(ids) == 1:
            found[marker] = int(ids[0])
    return found


def markers_as_tokens(generated_ids: Sequence[int] | None, text: str, marker_ids: Mapping[str, int]) -> str | None:
    """Whether every marker of the forced text came as the model's own token: None when so (or when
    the tokenizer has none of them as one token), else what differs. ``generated_ids`` None: the
    engine did not return them, so it cannot be told (the caller records that)."""
    if generated_ids is None:
        return "the engine returned no token ids (return_token_ids): the markers' tokens cannot be checked"
    ids = list(generated_ids)
    for marker, token in marker_ids.items():
        want = text.count(marker)
        got = ids.count(token)
        if want != got:
            return f"{marker!r} is {want} time(s) in the forced text but its token {token} was generated {got} time(s)"
    return None


# -- the stored corpus -----------------------------------------------------------------------------------


@cache
def corpus() -> tuple[ParserCase, ...]:
    from pytest_qualify.tasks.fixture_data import read_text

    cases = tuple(ParserCase.of(json.loads(line)) for line in read_text(CORPUS_FILE).splitlines() if line.strip())
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ParserCaseError(f"{CORPUS_FILE}: case ids repeat")
    return cases


@cache
def corpus_tools() -> tuple[Mapping[str, Any], ...]:
    """The tools every forced request offers: the tools module's set (``fixtures/tools/tools.json``)
    and the parsers' own (``fixtures/parsers/tools.json``: the JSON types and nesting the first lacks)."""
    from pytest_qualify.tasks.fixture_data import read_json

    return tuple(read_json("tools/tools.json")) + tuple(read_json(EXTRA_TOOLS_FILE))


def sample(cases: Sequence[ParserCase]) -> tuple[ParserCase, ...]:
    """The full stage's sample: the first cases of each kind, as many as ``SAMPLE_PER_KIND`` says."""
    taken: dict[str, int] = {}
    out = []
    for case in cases:
        if taken.get(case.kind, 0) < SAMPLE_PER_KIND.get(case.kind, 0):
            taken[case.kind] = taken.get(case.kind, 0) + 1
            out.append(case)
    return tuple(out)


def shards(cases: Sequence[ParserCase], size: int) -> tuple[tuple[ParserCase, ...], ...]:
    """The cases in groups of at most ``size``, kinds kept apart (one test item a group)."""
    out: list[tuple[ParserCase, ...]] = []
    for kind in KINDS:
        of_kind = [c for c in cases if c.kind == kind]
        out.extend(tuple(of_kind[i:i + size]) for i in range(0, len(of_kind), size))
    return tuple(out)


# -- the served parsers ------------------------------------------------------------------------------

# vLLM's --tool-call-parser names, by the syntax the model writes for them.
SYNTAX_OF_PARSER = {"qwen3_coder": "qwen3_coder", "qwen3_xml": "qwen3_coder", "hermes": "hermes",
                    "qwen3_json": "hermes"}


@dataclass(frozen=True)
class Served:
    """The parsers the recipe serves (its ``--tool-call-parser`` and ``--reasoning-parser``)."""

    tool_parser: str | None
    reasoning_parser: str | None

    @property
    def syntax(self) -> str | None:
        """The tool-call syntax to force, or None where the parser is none this module writes."""
        return SYNTAX_OF_PARSER.get(self.tool_parser or "")

    def label(self) -> str:
        return (f"--tool-call-parser {self.tool_parser or '(none)'}, "
                f"--reasoning-parser {self.reasoning_parser or '(none)'}")


def _flag(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def served(args: Sequence[str]) -> Served:
    """The parsers named in a serve command's arguments."""
    return Served(_flag(args, "--tool-call-parser"), _flag(args, "--reasoning-parser"))


def constrains_reasoning(args: Sequence[str]) -> bool:
    """Whether the server applies structured outputs inside the reasoning section
    (``--structured-outputs-config`` with ``enable_in_reasoning``): without it vLLM constrains only
    what follows the reasoning, and a reasoning text cannot be forced."""
    config = _flag(args, "--structured-outputs-config")
    if config is None:
        return False
    try:
        return bool(json.loads(config).get("enable_in_reasoning"))
    except (ValueError, AttributeError):
        return "enable_in_reasoning" in config and "true" in config.lower()


# -- what a run can ask, and its record ---------------------------------------------------------------

OUTCOMES_FILE = "parsers-cases.jsonl"
REASONING_KINDS = ("reasoning", "after_reasoning")


@dataclass(frozen=True)
class Plan:
    """Which cases this deployment can be asked, the syntax to force, and why any are left out."""

    served: Served
    plain_cases: bool  # the cases without reasoning (thinking off by default, or switchable off)
    reasoning_cases: bool  # the reasoning splits (thinking switchable on, reasoning constrained)
    thinking_off: bool  # the plain cases ask enable_thinking false (a deployment that thinks by default)
    left_out: tuple[str, ...]  # in words, for the record

    def runs(self, case: ParserCase) -> bool:
        return self.reasoning_cases if case.kind in REASONING_KINDS else self.plain_cases


def plan(args: Sequence[str], thinking_enabled: bool, thinking_overridable: bool) -> Plan:
    """What the recipe (its serve arguments, the profile's thinking switch) lets this module force."""
    parsers = served(args)
    left_out = []
    plain = parsers.syntax is not None and (not thinking_enabled or thinking_overridable)
    if parsers.syntax is None:
        left_out.append(f"tool-call cases: the served tool parser ({parsers.tool_parser or 'none'}) is not one "
                        f"this module writes ({', '.join(SYNTAX_OF_PARSER)})")
    elif not plain:
        left_out.append("tool-call and content cases: thinking is on and not switchable off, so every answer "
                        "starts with reasoning the constraint cannot force")
    reasoning = bool(parsers.reasoning_parser) and (thinking_enabled or thinking_overridable) \
        and constrains_reasoning(args) and parsers.syntax is not None
    if not reasoning:
        why = ("no --reasoning-parser" if not parsers.reasoning_parser else
               "thinking is off and not switchable on" if not (thinking_enabled or thinking_overridable) else
               "the server does not constrain the reasoning section (--structured-outputs-config "
               "'{\"enable_in_reasoning\": true}' is not set), so a reasoning text cannot be forced"
               if not constrains_reasoning(args) else "no tool-call syntax to force")
        left_out.append(f"reasoning splits: {why}")
    return Plan(parsers, plain, reasoning, thinking_enabled and thinking_overridable, tuple(left_out))


def append_outcome(run_dir: Any, line: Mapping[str, Any]) -> None:
    """One case's record in ``parsers-cases.jsonl`` (xdist workers share the run folder: one writer
    at a time, whole lines)."""
    import fcntl
    from pathlib import Path

    with open(Path(run_dir) / OUTCOMES_FILE, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        fh.flush()
        fcntl.flock(fh, fcntl.LOCK_UN)


# -- one case, asked both ways ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """One case asked plain and streamed: its graded outcome, its record line, and whether it is a
    deviation of the deployment (None), or was not generated as the model's own marker tokens
    (the forcing, not the parser, would be measured: ``unforced`` says how)."""

    case: ParserCase
    outcome: Any  # graders.parsers.CaseOutcome
    line: Mapping[str, Any]
    unforced: str | None

    @property
    def deviates(self) -> bool:
        o = self.outcome
        return not o.exact or o.parity is not None or o.incremental is False


@dataclass(frozen=True)
class ShardJudgement:
    """What one item's asked cases say of the deployment. A deviation whose markers came as the
    model's own tokens (or could not be told: no marker is one token here, no ids came back) is the
    parsers' and fails the item. One whose forced markers were spelt in other tokens measured the
    forcing, not the parser: it judges nothing of the deployment, so where no judged deviation
    fails the item, the item is not judged (neither a pass nor a FAIL: the run INCOMPLETE)."""

    cases: int
    deviations: tuple[str, ...]  # "<case id> (<note>): <deviations>", the parsers' own
    unforced: tuple[str, ...]  # "<case id>: <how the markers' tokens differ>"

    def failure(self, replay: str) -> str | None:
        """The item's FAIL reason, None when no judged deviation: ``replay`` names the record file."""
        if not self.deviations:
            return None
        besides = (f"; {len(self.unforced)} more were not generated as the model's own marker tokens "
                   "(not judged)") if self.unforced else ""
        return (f"{len(self.deviations)} of {self.cases} forced cases did not come back exactly (replay: {replay})"
                f"{besides}; " + " | ".join(self.deviations[:5]))

    def not_judged(self) -> str | None:
        """Why the item judged nothing (without the gate's "not judged: " head), None when it did."""
        if self.deviations or not self.unforced:
            return None
        return (f"{len(self.unforced)} of {self.cases} forced cases were not generated as the model's own marker "
                f"tokens, so they measured the forcing, not the parser: " + " | ".join(self.unforced[:3]))


def judge_shard(results: Sequence["Asked"]) -> ShardJudgement:
    """The item's judgement over its asked cases (:class:`ShardJudgement`)."""
    deviations, unforced = [], []
    for asked in results:
        if not asked.deviates:
            continue
        if asked.unforced is not None:
            unforced.append(f"{asked.case.id}: {asked.unforced}")
        else:
            deviations.append(f"{asked.case.id} ({asked.case.note}): {'; '.join(asked.outcome.deviations)}")
    return ShardJudgement(len(results), tuple(deviations), tuple(unforced))


def ask_case(chat: Any, case: ParserCase, syntax: str, markers: Mapping[str, int], *, thinking_off: bool,
             label: str, model: str, tokenize: Callable[[str], Sequence[int]] | None = None) -> Asked:
    """Ask ``case`` plain (with its generated ids) and streamed through ``chat(messages, **params)``
    (a ``client.answer.Answer`` back), grade both (``graders/parsers.py``) and build its record line:
    outcome, chunking, the markers' token check and, for a deviation, the request to replay it."""
    from pytest_qualify.graders.parsers import Expected, Seen, grade_case

    text = model_text(case, syntax)
    body = forced_body(case, syntax, corpus_tools(), markers, thinking_off=thinking_off,
                       text_ids=tokenize(text) if tokenize is not None else ())
    messages = body.pop("messages")
    plain = chat(messages, **body)
    # A parser may hold a call's arguments (or whitespace content) to the finish: the stream may stay
    # silent for as long as the whole answer takes, so its idle limit is the request's own budget.
    streamed = chat(messages, stream=True, stream_idle_s=STREAM_HELD_IDLE_S,
                    **{k: v for k, v in body.items() if k != "return_token_ids"})
    expected = Expected(tuple((c.name, c.arguments) for c in case.calls), case.content, case.reasoning)
    outcome = grade_case(case.id, expected, Seen.of(plain), Seen.of(streamed), plain.completion_tokens)
    choice = ((plain.raw or {}).get("choices") or [{}])[0]
    ids = choice.get("token_ids") if isinstance(choice.get("token_ids"), list) else None
    tokens = markers_as_tokens(ids, text, markers) if markers else None
    marked = tokens if tokens is not None else ("held" if markers else "no marker is one token here")
    line: dict[str, Any] = {"parsers": label, "kind": case.kind, "note": case.note, **outcome.as_dict(),
                            "markers_as_tokens": marked, "completion_tokens": plain.completion_tokens}
    asked = Asked(case, outcome, line, tokens if ids is not None else None)
    if asked.deviates:
        line["replay"] = {"method": "POST", "path": "/v1/chat/completions",
                          "body": {"model": model, "messages": messages, "temperature": 0, "seed": 1, **body}}
    return asked
