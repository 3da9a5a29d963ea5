"""The PASS path of the media modules through a real engine: ``mm-cpu-steered`` in launch mode, as an
operator runs it (the plugin starts vLLM with the recipe and the steering proxy in front of it, and
reads the steering log at the run's end: a forced answer that did not hold would leave it
INCOMPLETE). vLLM's media pipeline, tokenizer, hermes tool-call parser and streaming carry the
oracles' answers: admission, malformed media, all 30 corpus items. One run per server: nothing to
share. The verdict is FAIL on exactly the engine's listed behaviour (``ENGINE_FAILS``)."""

from __future__ import annotations

import pytest

from pytest_qualify.hooks.collection import suites_dir
from pytest_qualify.reference.steer import STEER_LOG
from .real_vllm import finish, items, require_vllm, run_dir, start
from .test_real_vllm_steered import check_steered_verdict

pytestmark = pytest.mark.real_vllm


def test_mm_cpu_steered_fails_only_on_the_engines_500(tmp_path_factory: pytest.TempPathFactory):
    env = require_vllm("mm-cpu-steered")
    run, proc = start(env, tmp_path_factory.mktemp("steer-mm"), "--qualify=mm-cpu-steered", "--repeat", "1",
                      str(suites_dir()))
    run = finish(run, env, proc, timeout_s=2400.0)
    assert "steering proxy ready at" in run.output, run.output[-3000:]
    data = check_steered_verdict(run, "mm-cpu-steered", run_dir(run.evidence) / STEER_LOG)
    assert len(items(data, "multimodal")) >= 30
