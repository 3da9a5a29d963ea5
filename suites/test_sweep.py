"""Sweep module — the figures a recipe's claims are held to (``[claims]``, gate/claims.py).

- **TTFT sweep**: per prompt size the profile names (``[sweep] prompt_tokens`` and every size a
  claim names), a prompt of exactly that many server tokens, sized like the lanes (a haystack of the
  project's filler, counted with ``POST /tokenize``, padded by one-token words where whole pieces
  skip the count; where no prompt lands on it, the closest within 0.1% is used and declared, and a
  prompt the harness cannot build leaves the item not judged, never the deployment's FAIL), sent ``samples`` times after one warm-up request: greedy, streamed, each sample
  under a fresh cache salt so no sample is served from the prefix cache (a cached token fails the
  item: its TTFT would not be a prefill). Beside the client's TTFT, the engine's own
  (``vllm:time_to_first_token_seconds`` read around the samples, their mean) where the server
  reports it and saw only these samples. Each sample decodes a fixed ``output_tokens``
  (``min_tokens = max_tokens``, ``ignore_eos``). TTFT per sample is recorded; the summary's
  ``timing.sweep`` keeps the median per size and prefill tok/s as the size over the median TTFT.
- **Single-stream decode probe**: per ``decode_prompt_tokens``, a prompt of exactly that size, then
  ``decode_samples`` requests alone on the server, each decoding exactly ``decode_tokens`` tokens
  (``min_tokens = max_tokens``, ``ignore_eos``, as the load module's probes); decode tok/s is
  ``(completion_tokens − 1) / (end to end − TTFT)``, vLLM bench's definition.

The module asserts nothing of the answers (they are filler, cut at their length); it fails only when
it could not measure: a prompt that cannot be sized, an HTTP error, a prefix-cache hit, a probe that
did not decode its fixed length, and a sample that came whole in one chunk with its finish where the
profile requires incremental streaming (otherwise a finding, and the sample is left out of the figures:
its "TTFT" is its end to end and it times no decode; a size where every sample came whole has no
figure, "not measurable here"). What the figures must be is the claims' business.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_qualify.checks import fail, held, sizing
from pytest_qualify.client.errors import EndpointError, RequestTimeout, ServerGone, error_message
from pytest_qualify.evidence.metrics import ENGINE_TTFT_NAMES, engine_mean
from pytest_qualify.graders.answer_checks import check_incremental
from pytest_qualify.hooks import state_of
from pytest_qualify.properties import HARNESS_FAILURE
from pytest_qualify.tasks.haystack import Haystack, Sized, SizingError, haystack_seed, plan_haystack, size_exactly

# One repetition (``qualify_repeat(1)``): its samples are the repetitions of a measurement, and at a
# 253,840-token prompt each costs the recipe's 105 s; more samples are ``[sweep] samples``.
pytestmark = [pytest.mark.qualify_module("sweep"), pytest.mark.qualify_repeat(1)]

MAX_TOKENIZE_CALLS = 10
PAD_CALLS = 8
# The closest prompt is used, and declared, when no prompt lands on the named size and the closest is
# within this share of it (a tokenizer where no filler and pad words sum to the size exactly).
DECLARED_SHARE = 0.001


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = state_of(metafunc.config)
    rules = state.profile.sweep if state is not None else None
    if "sweep_tokens" in metafunc.fixturenames:
        sizes = rules.prompt_tokens if rules is not None else ()
        metafunc.parametrize("sweep_tokens", sizes, ids=[f"{t}tok" for t in sizes])
    if "decode_prompt_tokens" in metafunc.fixturenames:
        sizes = rules.decode_prompt_tokens if rules is not None else ()
        metafunc.parametrize("decode_prompt_tokens", sizes, ids=[f"{t}tok" for t in sizes])


def _exact_prompt(sizer: Any, run_id: str, label: str, target: int, where: str, record: Any) -> Sized:
    """A haystack prompt of exactly ``target`` server tokens (whole filler pieces, then one-token pad
    words), sized once per run: every repetition sends the same prompt, each sample under its own
    cache salt. Where no prompt lands on the target, the closest within ``DECLARED_SHARE`` of it is
    used and declared (the item records its size); a prompt the harness cannot build at all leaves
    the item not judged (the gate's INCOMPLETE), never the deployment's FAIL."""
    plan = plan_haystack(haystack_seed(run_id, "sweep", label), 0.5, distractors=0)
    build = Haystack(plan).build

    def search() -> Sized:
        try:
            return size_exactly(build, sizer.count, target, max_calls=MAX_TOKENIZE_CALLS, pad_calls=PAD_CALLS,
                                rate=sizer.rate)
        except SizingError as exc:
            near = exc.closest
            if near is not None and abs(near.tokens - target) <= max(1, round(target * DECLARED_SHARE)):
                return near
            raise

    with sizing(where):  # /tokenize refused: the server's answer, judged as before
        try:
            return sizer.sized(f"sweep {plan.seed} {target}", search, build)
        except SizingError as exc:
            why = f"the harness (tasks/haystack.py) could not build a prompt of {target:,} server tokens: {exc}"
            record.props(**{HARNESS_FAILURE: why})
            fail(where, f"not judged: {why}")
    raise AssertionError("unreachable")


def _declared(sized: Sized, target: int) -> dict[str, Any]:
    """The size a sample was measured at where it is not the named one (declared, never hidden)."""
    return {} if sized.tokens == target else {"sweep_declared_prompt_tokens": sized.tokens}


def _fixed(tokens: int) -> dict[str, Any]:
    # vLLM's extra sampling parameters: exactly N output tokens, as the load module's decode probe.
    return {"max_tokens": tokens, "min_tokens": tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def _send(ask: Any, sized: Sized, tokens: int, salt: str, timeout_s: float, where: str) -> Any:
    try:
        return ask(sized.messages, salt_suffix=salt, check_finish=False, timeout_s=timeout_s, **_fixed(tokens))
    except EndpointError as exc:
        fail(where, f"HTTP {exc.status}: {error_message(exc.body)[:200]}")


class Incremental:
    """The samples that came whole in one chunk with their finish (``answer_checks.check_incremental``):
    such a sample's first chunk is its end to end, not a prefill, yet it would feed the TTFT claims.
    A finding by default; a failure at once under ``[integrity] incremental_streaming = "required"``."""

    def __init__(self, profile: Any) -> None:
        self.required = profile.integrity.incremental_streaming == "required"
        self.whole: list[str] = []

    def check(self, answer: Any, where: str, sample: str) -> bool:
        """Whether the sample streamed as decoded: one that came whole is no measure of its TTFT or
        its decode, and is left out of both (the figure is "not measurable here" when none is left)."""
        finding, failure = check_incremental(answer, self.required)
        if failure is not None:
            fail(where, f"{sample}: {failure}")
        if finding is not None:
            self.whole.append(f"{sample}: {finding}")
            return False
        return True

    def properties(self) -> dict[str, Any]:
        if not self.whole:
            return {}
        return {"sweep_whole_at_finish": len(self.whole), "stream_incremental": " | ".join(self.whole[:4])}


def _warm_up(ask: Any, sizer: Any, profile: Any, run_id: str, where: str, record: Any) -> None:
    """One request before the measured samples, at the sweep's smallest size, so the first sample
    does not pay the server's first-request costs."""
    sizes = [*profile.sweep.prompt_tokens, *profile.sweep.decode_prompt_tokens]
    smallest = min(sizes)
    sized = _exact_prompt(sizer, run_id, "warm-up", smallest, f"{where}: warm-up", record)
    _send(ask, sized, profile.sweep.output_tokens, "warm-up", profile.timeouts.for_prompt(smallest), f"{where}: warm-up")


def _samples(values: list[float]) -> str:
    return ",".join(f"{v:.6f}" for v in values)


def _scrape(client: Any) -> Any:
    """One ``/metrics`` snapshot, or None where it could not be read."""
    from pytest_qualify.evidence.metrics import MetricsParseError, parse

    try:
        return parse(client.metrics_text())
    except (MetricsParseError, EndpointError, ServerGone, RequestTimeout):
        return None


def test_ttft_sweep(sweep_tokens, qualify_sizer, qualify_ask, qualify_client, qualify_profile, qualify_run,
                    qualify_record, qualify_repetition):
    rules = qualify_profile.sweep
    where = f"TTFT sweep at {sweep_tokens:,} prompt tokens, repetition {qualify_repetition}"
    _warm_up(qualify_ask, qualify_sizer, qualify_profile, qualify_run.run_id, where, qualify_record)
    sized = _exact_prompt(qualify_sizer, qualify_run.run_id, f"ttft-{sweep_tokens}", sweep_tokens, where, qualify_record)
    # The engine's own TTFT over the samples (vllm:time_to_first_token_seconds): a prefill figure even
    # where every stream comes whole and the client's first chunk is the answer's end.
    before = _scrape(qualify_client)
    ttft, counted = [], set()
    incremental = Incremental(qualify_profile)
    for k in range(1, rules.samples + 1):
        answer = _send(qualify_ask, sized, rules.output_tokens, f"sample-{k}", qualify_profile.timeouts.for_prompt(sweep_tokens),
                       f"{where}, sample {k}")
        if answer.cached_tokens:
            fail(where, f"sample {k}: {answer.cached_tokens} of {answer.prompt_tokens} prompt tokens came from the "
                        "prefix cache under a fresh cache_salt: its TTFT is no prefill")
        if answer.timeline is None or answer.timeline.ttft_s is None:
            fail(where, f"sample {k}: the stream gave no first token, so no TTFT")
        if incremental.check(answer, where, f"sample {k}"):
            ttft.append(answer.timeline.ttft_s)
        if answer.prompt_tokens is not None:
            counted.add(answer.prompt_tokens)
    engine = engine_mean(before, _scrape(qualify_client), ENGINE_TTFT_NAMES, rules.samples)
    qualify_record.props(**({"sweep_engine_ttft_s": round(engine.value, 6), "sweep_engine_ttft_source": engine.metric}
                            if engine.value is not None else {"sweep_engine_ttft_why": engine.why}))
    qualify_record.props(sweep_prompt_tokens=sweep_tokens, sweep_samples=len(ttft), sweep_ttft_s_samples=_samples(ttft),
                         sweep_output_tokens=rules.output_tokens, tokenize_calls=sized.calls,
                         **({"sweep_measured_prompt_tokens": counted.pop()} if len(counted) == 1 else {}),
                         **_declared(sized, sweep_tokens), **incremental.properties())
    held(where, f"{len(ttft)} of {rules.samples} samples timed"
                + ("" if ttft else " (each came whole in one chunk: not measurable here)"))


def test_decode_probe(decode_prompt_tokens, qualify_sizer, qualify_ask, qualify_profile, qualify_run, qualify_record,
                      qualify_repetition):
    rules = qualify_profile.sweep
    where = f"decode probe at {decode_prompt_tokens:,} prompt tokens, repetition {qualify_repetition}"
    _warm_up(qualify_ask, qualify_sizer, qualify_profile, qualify_run.run_id, where, qualify_record)
    sized = _exact_prompt(qualify_sizer, qualify_run.run_id, f"decode-{decode_prompt_tokens}", decode_prompt_tokens,
                          where, qualify_record)
    rates = []
    incremental = Incremental(qualify_profile)
    for k in range(1, rules.decode_samples + 1):
        answer = _send(qualify_ask, sized, rules.decode_tokens, f"decode-{k}",
                       qualify_profile.timeouts.for_prompt(decode_prompt_tokens) + rules.decode_tokens * 0.5,
                       f"{where}, sample {k}")
        if answer.completion_tokens != rules.decode_tokens:
            fail(where, f"sample {k}: decoded {answer.completion_tokens} tokens, not the fixed {rules.decode_tokens} "
                        "(min_tokens = max_tokens, ignore_eos)")
        line = answer.timeline
        if line is None or line.ttft_s is None or line.e2e_s is None or line.e2e_s <= line.ttft_s:
            fail(where, f"sample {k}: no first token and end of stream to time the decode by")
        if incremental.check(answer, where, f"sample {k}"):
            rates.append((rules.decode_tokens - 1) / (line.e2e_s - line.ttft_s))
    qualify_record.props(decode_probe_prompt_tokens=decode_prompt_tokens, decode_probe_tokens=rules.decode_tokens,
                         decode_probe_samples=len(rates), decode_probe_tok_s_samples=_samples(rates),
                         tokenize_calls=sized.calls, **_declared(sized, decode_prompt_tokens), **incremental.properties())
    held(where, f"{len(rates)} of {rules.decode_samples} samples timed"
                + ("" if rates else " (each came whole in one chunk: not measurable here)"))
