"""The sweep's exact prompt sizes (tasks/haystack.py ``size_exactly``): whole filler pieces, then
one-token pad words, where the first pad word may cost more than itself (it splits a token that
spanned the document's end: Qwen's ``".\\n"``). Held on a counting rule that behaves so, and on the
real Qwen3 and Llama tokenizers (``tokenizers`` on the tiny models' tokenizer.json, the chat template
rendered as ``/tokenize`` renders it; no server) at 2,048, 32,768 and 131,072 tokens."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_qualify.tasks.haystack import (
    DOCUMENT_END, PAD_WORD, Haystack, SizingError, haystack_seed, pad_to_tokens, plan_haystack, size_exactly,
    size_to_tokens,
)

ROOT = Path(__file__).resolve().parents[2]


def _boundary_count(messages) -> int:
    """Three tokens a word, so whole filler pieces skip most sizes; one a pad word, and the first pad
    word one more (it splits the document's last sentence end from its closing tag)."""
    text = " ".join(str(m["content"]) for m in messages)
    head, _, tail = text.rpartition(DOCUMENT_END)
    body = head
    pad = 0
    while body.endswith(PAD_WORD):
        body, pad = body[: -len(PAD_WORD)], pad + 1
    return 3 * len((body + " " + tail).split()) + pad + (1 if pad else 0)


def _just_past_a_piece(build, count) -> int:
    """A target one token above a whole-piece prompt (the next piece adds three or more)."""
    for units in range(20, 200):
        here, there = count(build(units)), count(build(units + 1))
        if there - here >= 3:
            return here + 1
    raise AssertionError("no piece of four or more words")


def test_a_pad_word_that_splits_the_documents_end_still_lands_exactly():
    build = Haystack(plan_haystack(haystack_seed("r", "sweep", "x"), 0.5, distractors=0)).build
    target = _just_past_a_piece(build, _boundary_count)
    with pytest.raises(SizingError) as exc:
        size_to_tokens(build, _boundary_count, target, max_calls=10)
    # One word from the piece below costs two tokens: the old padding stopped at target - 1.
    sized = pad_to_tokens(build, _boundary_count, target, exc.value.closest)
    assert sized.tokens == target == _boundary_count(sized.messages) and sized.pad >= 2
    assert size_exactly(build, _boundary_count, target).tokens == target


def test_a_size_below_the_smallest_prompt_raises_with_the_closest():
    build = Haystack(plan_haystack(haystack_seed("r", "sweep", "y"), 0.5, distractors=0)).build
    with pytest.raises(SizingError) as exc:
        size_exactly(build, _boundary_count, 16)
    assert exc.value.closest is not None and exc.value.closest.tokens > 16


# Counts chats as vLLM's /tokenize does (the model's chat template with the generation prompt, no
# special tokens added again; the recipe's enable_thinking false), in the vLLM venv, which has the
# ``tokenizers`` library: one JSON chat a line in, its token count a line out.
COUNTER = r"""
import json, sys
from pathlib import Path
import jinja2
from tokenizers import Tokenizer

model = Path(sys.argv[1])
tok = Tokenizer.from_file(str(model / "tokenizer.json"))
template = jinja2.Environment().from_string((model / "chat_template.jinja").read_text())
for line in sys.stdin:
    text = template.render(messages=json.loads(line), add_generation_prompt=True, enable_thinking=False)
    print(len(tok.encode(text, add_special_tokens=False).ids), flush=True)
"""


class Counter:
    def __init__(self, python: Path, model_dir: Path) -> None:
        self.proc = subprocess.Popen([str(python), "-c", COUNTER, str(model_dir)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.calls = 0

    def __call__(self, messages) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(messages) + "\n")
        self.proc.stdin.flush()
        self.calls += 1
        line = self.proc.stdout.readline()
        assert line, f"the counter exited ({self.proc.poll()})"
        return int(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.mark.real_vllm
@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-llama"])
def test_exact_sizes_on_the_real_tokenizers(model):
    from ..real_vllm import require_vllm

    env = require_vllm("262k-cpu" if model == "tiny-qwen3" else "tiny-cpu")
    count = Counter(env.python, env.model_dir)
    try:
        # run0 and run7: 2,048-token Qwen3 haystacks whose document ends where the first pad word
        # splits ".\n" (the H100's "no closer than 2047"); run2 one that whole pieces nearly hit.
        for size in (2048, 32768, 131072):
            for run in ("run0", "run7", "run2"):
                build = Haystack(plan_haystack(haystack_seed(run, "sweep", f"ttft-{size}"), 0.5, distractors=0)).build
                before = count.calls
                sized = size_exactly(build, count, size)
                assert sized.tokens == size == count(sized.messages), (model, size, run)
                assert count.calls - before <= 10 + 8 + 1, (model, size, run, count.calls - before)
    finally:
        count.close()
