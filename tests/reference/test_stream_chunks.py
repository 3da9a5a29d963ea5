"""How a streamed answer came in chunks, end to end through the client against the reference server:
the running usage on every chunk (vLLM's ``continuous_usage_stats``) gives each chunk's tokens, so the
decode probe's inter-token latency is per token as well as per chunk; and the server's ``stream_whole``
mode (vLLM 0.32.0 with a tool parser on: a plain chat's text held until its finish, engines.toml) is
found by the per-answer check: a finding by default, a failure where the profile requires
incremental streaming."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_qualify.client.endpoint import QualifyClient
from pytest_qualify.graders.answer_checks import INCREMENTAL_MIN_TOKENS, check_answer
from pytest_qualify.graders.load import ProbeTiming, check_probe, level_figures
from pytest_qualify.profiles import load_profile
from pytest_qualify.reference.faults import Faults
from pytest_qualify.reference.state import ReferenceState
from pytest_qualify.tasks.load import Probe
from .in_thread import serving

PROFILE = load_profile("small")


@pytest.fixture(params=[False, True], ids=["as-decoded", "stream-whole"])
def client(request):
    with serving(ReferenceState(PROFILE, Faults(), None, 0.0, 4000.0, stream_whole=request.param)) as url:
        qc = QualifyClient(url, None, PROFILE.deployment.served_name, 30.0)
        try:
            yield qc, request.param
        finally:
            qc.close()


def test_the_decode_probe_knows_each_chunks_tokens(client):
    qc, whole = client
    probe = Probe(48)
    params = dict(probe.params)
    params.pop("stream")
    answer = qc.chat(list(probe.messages), stream=True, temperature=0, **params)
    assert check_probe(answer, 48), answer.stream
    shape = answer.stream
    assert len(shape.chunk_tokens) == shape.chunks and sum(shape.chunk_tokens) == 48
    timeline = answer.timeline
    timing = ProbeTiming(timeline.ttft_s, timeline.e2e_s, 48, tuple(timeline.inter_chunk_s), shape.chunk_tokens)
    figures = level_figures([timing], 1, 48, 1.0)
    if whole:
        # Role chunk, then all 48 tokens with the finish: one gap, over 48 tokens.
        assert shape.whole_at_finish and timing.tokens_per_chunk == (48,)
        assert figures["itl_token_s_p50"] == pytest.approx(figures["itl_s_p50"] / 48)
        assert figures["tokens_per_chunk_max"] == 48
    else:
        assert not shape.whole_at_finish and max(timing.tokens_per_chunk) < 48 and shape.output_chunks > 1
        assert figures["itl_token_s_p50"] < figures["itl_s_p50"] and figures["tokens_per_chunk_p50"] >= 1


def test_an_answer_that_came_whole_is_a_finding_or_a_failure_when_required(client):
    qc, whole = client
    answer = qc.chat([{"role": "user", "content": "Count upward from 1."}], stream=True, temperature=0,
                     max_tokens=32, ignore_eos=True)
    assert answer.completion_tokens >= INCREMENTAL_MIN_TOKENS and answer.finish_reason == "length"
    # The same stream as an answer that stopped on its own (a cut one fails its finish check first).
    answer = dataclasses.replace(answer, finish_reason="stop")
    found, required = check_answer(answer), check_answer(answer, incremental_required=True)
    props = dict(found.properties)
    assert props["finish_check"] == "ok" and props["stream_check"] == "ok"
    if whole:
        assert "in one chunk with the finish" in props["stream_incremental"]
        assert required.failure is not None and "requires incremental streaming" in required.failure
    else:
        assert "stream_incremental" not in props and required.failure == found.failure


def test_a_short_answer_in_one_chunk_is_no_finding():
    class Shape:
        whole_at_finish = True

    class Short:
        stream = Shape()
        usage = {"completion_tokens": INCREMENTAL_MIN_TOKENS - 1}
        completion_tokens = INCREMENTAL_MIN_TOKENS - 1

    from pytest_qualify.graders.answer_checks import check_incremental

    assert check_incremental(Short(), True) == (None, None)
