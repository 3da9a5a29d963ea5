"""Protocol module — the deployment's own parsers, proven by forced decoding.

Each case of the stored corpus (``fixtures/parsers/corpus.jsonl``: tool calls of every JSON type
and nesting, parallel calls, calls after content and after reasoning, reasoning splits, content a
parser may hold back) is written as the model writes it in the served syntax and forced with the
engine's own structured outputs (``tasks/parsers.py``), then asked plain and streamed. Both must
come back exactly as forced (``graders/parsers.py``): the same calls with JSON-equal arguments,
``finish_reason`` ``tool_calls``, the reasoning in its field, no markup left in the content; the
stream must reassemble to the plain answer, and a long call's arguments must arrive in more than
one delta. Every deviation fails the item, naming the parser, the engine version and the case; each
case's outcome, how its content was chunked and, for a deviation, the request to replay it go to
``parsers-cases.jsonl``. A deviating case whose forced markers were not generated as the model's own
marker tokens measured the forcing, not the parser: where no other deviation fails the item, the item
is not judged (the run INCOMPLETE, naming why), never a FAIL of the deployment.

The full stage asks a sample (``tasks/parsers.SAMPLE_PER_KIND``); ``--qualify-stage parsers`` asks
the whole corpus. Cases the deployment cannot be made to emit are not asked, and the item says so:
reasoning splits where the server does not constrain the reasoning section (vLLM's
``--structured-outputs-config '{"enable_in_reasoning": true}'``) or thinking cannot be switched on.
One repetition only: the forced text is the same every time, and the corpus is the repetition.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_qualify.checks import fail, held
from pytest_qualify.graders.parsers import figures
from pytest_qualify.hooks import state_of
from pytest_qualify.properties import HARNESS_FAILURE
from pytest_qualify.tasks import parsers

pytestmark = [pytest.mark.qualify_module("parsers"), pytest.mark.qualify_repeat(1)]

STAGE = "parsers"
SHARD_CASES = 100


def _plan(profile) -> parsers.Plan:  # type: ignore[no-untyped-def]
    return parsers.plan(profile.serve.args, profile.thinking.enabled, profile.thinking.overridable)


def _cases(config: pytest.Config) -> tuple[parsers.ParserCase, ...]:
    """The stage's cases (the whole corpus in the parsers stage, else the sample) that this
    deployment can be made to emit; the others are named on every item (``parser_cases_left_out``)."""
    state = state_of(config)
    if state is None:
        return ()
    stage = state.stage_run.stage.name if state.stage_run is not None else None
    cases = parsers.corpus() if stage == STAGE else parsers.sample(parsers.corpus())
    plan = _plan(state.profile)
    return tuple(case for case in cases if plan.runs(case))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "shard" in metafunc.fixturenames:
        # No case to force is one empty group: its item fails saying why, never a module with no item.
        groups = parsers.shards(_cases(metafunc.config), SHARD_CASES) or ((),)
        metafunc.parametrize("shard", groups, ids=[f"{g[0].id}..{g[-1].id}" if g else "none" for g in groups])


_MARKERS: dict[str, dict[str, int]] = {}


def _marker_ids(client) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The markers the tokenizer holds as one token each (``/tokenize`` without special tokens)."""
    if client.model not in _MARKERS:
        _MARKERS[client.model] = parsers.marker_ids(client.text_token_ids)
    return _MARKERS[client.model]


def test_forced_cases(shard, qualify_ask, qualify_client, qualify_profile, qualify_run, qualify_record, request):
    profile = qualify_profile
    plan = _plan(profile)
    engine = (qualify_run.server_info.version if qualify_run.server_info is not None else None) or "unknown"
    label = f"{plan.served.label()}, engine {engine}"
    left_out = "; ".join(plan.left_out) or "none"
    if not shard:
        fail(f"parsers ({label})", f"no case can be forced on this deployment: {left_out}")
    qualify_record.props(parsers=label, parser_cases_left_out=left_out, parser_shard=f"{shard[0].id}..{shard[-1].id}")
    where = f"parsers {shard[0].kind} {shard[0].id}..{shard[-1].id} ({label})"
    markers = _marker_ids(qualify_client)

    def one(case: parsers.ParserCase) -> parsers.Asked:
        def chat(messages, stream=False, **params):  # type: ignore[no-untyped-def]
            how = "stream" if stream else "plain"
            return qualify_ask(messages, check_finish=False, stream=stream, salt_suffix=f"-{case.id}-{how}", **params)

        return parsers.ask_case(chat, case, plan.served.syntax, markers, thinking_off=plan.thinking_off,
                                label=label, model=profile.deployment.served_name,
                                tokenize=qualify_client.text_token_ids)

    # At the deployment's own admission limit: the engine batches them, as it would its clients'.
    with ThreadPoolExecutor(max(1, profile.limits.max_num_seqs)) as pool:
        results = list(pool.map(one, shard))
    for asked in results:
        parsers.append_outcome(qualify_run.run_dir, {"test": request.node.nodeid, **asked.line})
    judgement = parsers.judge_shard(results)
    figs = figures([asked.outcome for asked in results])
    qualify_record.props(**{f"parser_{k}": v for k, v in figs.as_dict().items()},
                         parser_unforced=len(judgement.unforced))
    failure = judgement.failure(str(qualify_run.run_dir / parsers.OUTCOMES_FILE))
    if failure is not None:
        fail(where, failure)
    why = judgement.not_judged()
    if why is not None:
        # The forcing, not the parser, was measured: nothing of the deployment was judged, so the
        # gate counts the item not judged (the run INCOMPLETE, naming why), never a FAIL.
        qualify_record.props(**{HARNESS_FAILURE: why})
        fail(where, f"not judged: {why}")
    held(where, f"{figs.exact} of {figs.cases} forced cases came back exactly, plain and streamed "
                f"(parity {figs.parity}, incremental {figs.incremental} of {figs.incremental_of}, "
                f"content held to the finish in {figs.held})")
