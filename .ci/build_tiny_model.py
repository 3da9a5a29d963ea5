"""Build ``tiny-llama``: a random-weight Llama that vLLM (CPU) can serve.

Offline and deterministic: a byte-level BPE tokenizer is trained on text
generated here, the weights come from a seeded ``LlamaConfig`` model and the
result is written with ``save_pretrained`` (safetensors). The model talks
nonsense; it exists so that the qualification protocol can be exercised
against a real vLLM server in about a minute of start-up.

Shape constraints:
  * window 4096 tokens (``max_position_embeddings``);
  * head_dim 32 -- the CPU attention backend rejects head size 16;
  * ChatML chat template, hermes-style tools (tools listed in the system
    block, calls written as ``<tool_call>{json}</tool_call>``), with
    ``<tool_call>``/``</tool_call>`` in the vocabulary so that vLLM's
    ``hermes`` tool parser accepts the tokenizer.

Run with the vLLM venv's python:  python build_tiny_model.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

BUILD_ID = "tiny-llama/v1"
WINDOW = 4096
VOCAB_SIZE = 4096

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added as plain (non-special) tokens so they survive detokenisation and the
# tool parser can find them in the generated text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

CHAT_TEMPLATE = """\
{%- macro render_content(content) -%}
{%- if content is string -%}{{ content }}
{%- elif content is iterable -%}{%- for part in content -%}{%- if part.text is defined -%}{{ part.text }}{%- endif -%}{%- endfor -%}
{%- elif content is not none -%}{{ content }}
{%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if has_system -%}{{- render_content(messages[0].content) + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' -}}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments ' -}}
{{- 'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\\n' + render_content(messages[0].content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant' -}}
{%- if message.content -%}{{- '\\n' + render_content(message.content) -}}{%- endif -%}
{%- if message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set fn = call.function if call.function is defined else call -%}
{{- '\\n<tool_call>\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- '}\\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\\n<tool_response>\\n' + render_content(message.content) + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + render_content(message.content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""

_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or "
    "an which but not have has had were can all if will one would there their "
    "what so up out about who get which go me when make like time no just him "
    "know take people into year your good some could them see other than then "
    "now look only come its over think also back after use two how our work "
    "first well way even new want because any these give day most us model "
    "server request response token prompt answer question window context cache "
    "latency throughput deployment qualify test report lane budget stream chunk "
    "function tool call arguments name value result error status health metrics "
    "weather city temperature search query file path line code python json list "
    "number string object array true false null return def class import print"
).split()

_SNIPPETS = [
    'def add(a, b):\n    return a + b\n',
    'for i in range(10):\n    print(i * i)\n',
    'import json\nprint(json.dumps({"ok": True}))\n',
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}',
    'class Lane:\n    def __init__(self, size):\n        self.size = size\n',
    'SELECT id, name FROM users WHERE age > 30 ORDER BY name;',
    'The quick brown fox jumps over the lazy dog. 0123456789',
    'Hello! How can I help you today?',
    'Error: the request could not be completed (status 400).',
]


def _corpus(seed: int = 1234, lines: int = 6000) -> list[str]:
    rng = random.Random(seed)
    out = list(_SNIPPETS) * 20
    out.append(CHAT_TEMPLATE)
    for _ in range(lines):
        n = rng.randint(4, 24)
        words = [rng.choice(_WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        sep = rng.choice([". ", ", ", "? ", "! ", "\n", " - "])
        tail = rng.choice(["", str(rng.randint(0, 9999)), rng.choice(_SNIPPETS)])
        out.append(" ".join(words) + sep + tail)
    return out


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TOKENS),
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=WINDOW,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(TOOL_TOKENS, special_tokens=False)
    return fast


def _check(out: Path) -> None:
    """Reload from disk and render a tools conversation."""
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    cfg = AutoConfig.from_pretrained(out)
    assert cfg.max_position_embeddings == WINDOW, cfg.max_position_embeddings
    assert cfg.hidden_size // cfg.num_attention_heads == 32
    tools = [{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]},
        },
    }]
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    ]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                   add_generation_prompt=True)
    for needle in ("<tools>", '"name": "get_weather"', "<tool_call>\n{\"name\": \"get_weather\", "
                   "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "<tool_response>",
                   "<|im_start|>assistant\n"):
        assert needle in text, (needle, text)
    assert text.startswith("<|im_start|>system\nYou are terse.\n\n# Tools"), text
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text, "tokenizer does not round-trip"
    vocab = tok.get_vocab()
    for t in TOOL_TOKENS + SPECIAL_TOKENS:
        assert t in vocab, t
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                    add_generation_prompt=True)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", plain
    print(f"[tiny-llama] check ok: tools conversation renders to {len(ids)} tokens")


def build(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = _build_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=WINDOW,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad).save_pretrained(tmp)
    _check(tmp)
    (tmp / "qualify-build.json").write_text(json.dumps({
        "build": BUILD_ID, "window": WINDOW, "vocab_size": len(tok),
        "weights": "random (torch.manual_seed(0))",
    }, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="output model directory")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args(argv)
    out: Path = args.out.expanduser().resolve()
    stamp = out / "qualify-build.json"
    t0 = time.monotonic()
    if not args.force and stamp.is_file():
        try:
            if json.loads(stamp.read_text()).get("build") == BUILD_ID and \
                    (out / "model.safetensors").is_file():
                print(f"[tiny-llama] {out} up to date ({BUILD_ID}) -- skipped")
                return 0
        except (OSError, ValueError):
            pass
    out.parent.mkdir(parents=True, exist_ok=True)
    build(out)
    print(f"[tiny-llama] built {out} in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
