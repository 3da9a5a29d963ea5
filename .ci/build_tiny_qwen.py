"""Build the two tiny random-weight Qwen models that vLLM (CPU) serves for the promoted
deployment's own paths:

  * ``tiny-qwen2.5-vl`` -- ``Qwen2_5_VLForConditionalGeneration``: text hidden 128, 2 heads of
    head_dim 64 (the CPU attention backend refuses head size 16), 2 layers; vision tower depth 2,
    hidden 32, 2 heads; ``Qwen2VLImageProcessor`` / ``Qwen2VLVideoProcessor`` configs; a chat
    template that places ``<|vision_start|><|image_pad|><|vision_end|>`` (``<|video_pad|>``) for
    each image (video) part and renders hermes-style tools. For the multimodal profile.
  * ``tiny-qwen3`` -- ``Qwen3ForCausalLM``: text hidden 128, one layer of one head (head_dim 64,
    one KV head; ``qwen3-tp2``: two heads and two KV heads, for ``--tensor-parallel-size 2``), a 262,144-token window, a qwen3-style template that honours ``enable_thinking`` and renders tools the way the
    ``qwen3_coder`` parser reads them. For the 262k-shaped profile.

Both use the Qwen2.5 tokenizer held in the GGUF that ``build_cpu_model.py`` assembles and
verifies (it carries the vision tokens and ``<tool_call>``); ``tiny-qwen3`` adds Qwen3's four
tokens (``<tool_response>``, ``</tool_response>``, ``<think>``, ``</think>``) at Qwen3's ids.

Offline and deterministic: every weight is drawn from numpy's PCG64 seeded by the tensor's name
(the same bits on any machine), written as float32 safetensors. The sha256 of the weights file is
checked against the value recorded here (a mismatch stops the build, exit code 3, like the GGUF's)
and every file's sha256 goes into the stamp ``qualify-build.json``.

Run with the vLLM venv's python:  python build_tiny_qwen.py {vl,qwen3} --out DIR --gguf-dir DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_cpu_model import GGUF_NAME, GGUF_SHA256, ChecksumError, ensure_gguf  # noqa: E402

# The weights' sha256 per model; the build fails when it differs (the builder is meant to give the
# same bits every time). Change the BUILD_ID with the shape, then record the new value.
BUILDS = {
    "vl": {"id": "tiny-qwen2.5-vl/v1",
           "weights_sha256": "12ddd1bf970a4494dcf945e1ddcbc6369c27390af82196e8c3ff54561614e6b7"},
    "qwen3": {"id": "tiny-qwen3/v2",
              "weights_sha256": "0150e0072ef118f2df7a415944c8219e7992ed29fc653baadd6c63e45fbc5d90"},
    # tiny-qwen3 with two heads and two KV heads: tensor parallelism over 2 GPUs splits the heads.
    "qwen3-tp2": {"id": "tiny-qwen3-tp2/v1",
                  "weights_sha256": "a512b11f072bb97eed81a4a9602493006a83d4b2921bdb8b07c8ac9547fdd11d"},
}
# Attention heads (= KV heads) per Qwen3 build: --tensor-parallel-size must divide both.
QWEN3_BUILD_HEADS = {"qwen3": 1, "qwen3-tp2": 2}

TEXT_HIDDEN = 128
TEXT_HEADS = 2
TEXT_HEAD_DIM = 64
TEXT_LAYERS = 2
TEXT_INTERMEDIATE = 256
# tiny-qwen3 prefills the 262k recipe's 240K lane and the 261,888-token prompt that fits the window:
# on CPU that is attention work, quadratic in the prompt and linear in layers x heads. One layer of
# one head (v2) takes a quarter of v1's two layers of two heads (measured in CI: 341 s for the 240K
# lane with v1); nothing here reads the random weights' answers, only the engine's paths.
QWEN3_LAYERS = 1
QWEN3_HEADS = 1
VOCAB_SIZE = 151936  # Qwen2.5's embedding rows (the tokenizer's 151,665 tokens, padded)
VL_WINDOW = 32768
QWEN3_WINDOW = 262144
WEIGHT_STD = 0.02

QWEN3_TOKENS = ["<tool_response>", "</tool_response>", "<think>", "</think>"]
QWEN3_FIRST_ID = 151665  # their ids in Qwen3: 151665..151668
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
# A few hundred tokens per image at most: the corpus images are 224x224 (64 tokens each).
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 256 * 28 * 28

# Hermes-style tools (as Qwen2.5's own template) and Qwen2-VL's vision placeholders.
VL_TEMPLATE = """\
{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- macro render_content(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is not none -%}
{%- for part in content -%}
{%- if part.type == 'image' or part.type == 'image_url' or 'image' in part -%}
{%- set image_count.value = image_count.value + 1 -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
{%- elif part.type == 'video' or part.type == 'video_url' or 'video' in part -%}
{%- set video_count.value = video_count.value + 1 -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
{%- elif part.text is defined -%}{{- part.text -}}
{%- endif -%}
{%- endfor -%}
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
{%- else -%}
{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant' -}}
{%- if message.content -%}{{- '\\n' + render_content(message.content) -}}{%- endif -%}
{%- for call in message.tool_calls or [] -%}
{%- set fn = call.function if call.function is defined else call -%}
{{- '\\n<tool_call>\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- '}\\n</tool_call>' -}}
{%- endfor -%}
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

# Qwen3's turn structure and thinking switch, with tools and calls written as Qwen3-Coder does
# (the format vLLM's qwen3_coder parser reads): <tool_call><function=NAME><parameter=P>V</parameter>.
QWEN3_TEMPLATE = """\
{%- macro render_content(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is not none -%}{%- for part in content -%}{%- if part.text is defined -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if has_system -%}{{- render_content(messages[0].content) + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>' -}}
{%- for tool in tools -%}
{%- set fn = tool.function if tool.function is defined else tool -%}
{{- '\\n<function>\\n<name>' + fn.name + '</name>' -}}
{%- if fn.description is defined -%}{{- '\\n<description>' + fn.description + '</description>' -}}{%- endif -%}
{{- '\\n<parameters>' + (fn.parameters | tojson) + '</parameters>\\n</function>' -}}
{%- endfor -%}
{{- '\\n</tools>\\n\\nIf you choose to call a function ONLY reply in the following format:\\n' -}}
{{- '<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\\n' + render_content(messages[0].content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
{%- set content = render_content(message.content) -%}
{%- if '</think>' in content -%}{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}
{{- '<|im_start|>assistant\\n' + content -}}
{%- for call in message.tool_calls or [] -%}
{%- set fn = call.function if call.function is defined else call -%}
{{- '\\n<tool_call>\\n<function=' + fn.name + '>\\n' -}}
{%- if fn.arguments is mapping -%}
{%- for key, value in fn.arguments.items() -%}
{{- '<parameter=' + key + '>\\n' + (value if value is string else value | tojson) + '\\n</parameter>\\n' -}}
{%- endfor -%}
{%- else -%}{{- fn.arguments -}}{{- '\\n' -}}
{%- endif -%}
{{- '</function>\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\\n<tool_response>\\n' + render_content(message.content) + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + render_content(message.content) + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}
{%- endif -%}
"""


def log(msg: str) -> None:
    print(f"[tiny-qwen] {msg}", flush=True)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def load_tokenizer(gguf: Path, extra_tokens: list[str]):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    vocab = tok.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                           *VISION_TOKENS) if t not in vocab]
    if missing:
        raise RuntimeError(f"the GGUF's tokenizer lacks {missing}")
    if extra_tokens:
        # The GGUF pads the vocabulary to the embedding's 151,936 rows with [PADn] entries; Qwen3's
        # tokens take the first of those ids, as in Qwen3's own tokenizer, and become added tokens
        # (never split by the pre-tokenizer).
        from tokenizers import Tokenizer

        data = json.loads(tok.backend_tokenizer.to_str())
        vocab = data["model"]["vocab"]
        for i, token in enumerate(extra_tokens):
            token_id = vocab.pop(f"[PAD{QWEN3_FIRST_ID + i}]")
            vocab[token] = token_id
            data["added_tokens"].append({"id": token_id, "content": token, "single_word": False, "lstrip": False,
                                         "rstrip": False, "normalized": False, "special": False})
        tok = type(tok)(tokenizer_object=Tokenizer.from_str(json.dumps(data)), eos_token=tok.eos_token,
                        pad_token=tok.pad_token, bos_token=tok.bos_token, unk_token=None)
        ids = [tok.convert_tokens_to_ids(t) for t in extra_tokens]
        if ids != list(range(QWEN3_FIRST_ID, QWEN3_FIRST_ID + len(extra_tokens))):
            raise RuntimeError(f"Qwen3's tokens got ids {ids}")
    return tok


def randomise(model) -> None:  # type: ignore[no-untyped-def]
    """Overwrite every parameter with draws from PCG64 seeded by its name: the same bits on any
    machine and torch build (torch's own initialisers need not be). Norm weights are 1, biases 0."""
    import numpy as np
    import torch

    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith(".bias"):
                values = np.zeros(param.shape, dtype=np.float32)
            elif "norm" in name:
                values = np.ones(param.shape, dtype=np.float32)
            else:
                rng = np.random.Generator(np.random.PCG64(zlib.crc32(name.encode())))
                values = (rng.standard_normal(param.shape) * WEIGHT_STD).astype(np.float32)
            param.copy_(torch.from_numpy(values))


def text_config_kwargs(tok, window: int) -> dict:  # type: ignore[no-untyped-def]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    return dict(
        vocab_size=VOCAB_SIZE, hidden_size=TEXT_HIDDEN, intermediate_size=TEXT_INTERMEDIATE,
        num_hidden_layers=TEXT_LAYERS, num_attention_heads=TEXT_HEADS, num_key_value_heads=TEXT_HEADS,
        max_position_embeddings=window, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=pad, eos_token_id=eos, pad_token_id=pad,
    )


def build_vl(tok, tmp: Path) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import (
        GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor, Qwen2VLVideoProcessor,
    )

    tok.chat_template = VL_TEMPLATE
    tok.model_max_length = VL_WINDOW
    text = text_config_kwargs(tok, VL_WINDOW)
    text.update(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [8, 12, 12]})  # sums to head_dim / 2
    cfg = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_chans=3, out_hidden_size=TEXT_HIDDEN,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
            tokens_per_second=2,
        ),
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    model = Qwen2_5_VLForConditionalGeneration(cfg).to(torch.float32).eval()
    randomise(model)
    model.save_pretrained(tmp, safe_serialization=True)
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS),
        video_processor=Qwen2VLVideoProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS),
        tokenizer=tok, chat_template=VL_TEMPLATE,
    )
    processor.save_pretrained(tmp)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad).save_pretrained(tmp)


def build_qwen3(tok, tmp: Path, heads: int = QWEN3_HEADS) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok.chat_template = QWEN3_TEMPLATE
    tok.model_max_length = QWEN3_WINDOW
    text = text_config_kwargs(tok, QWEN3_WINDOW)
    text.update(num_hidden_layers=QWEN3_LAYERS, num_attention_heads=heads, num_key_value_heads=heads)
    cfg = Qwen3Config(head_dim=TEXT_HEAD_DIM, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
                      **text)
    model = Qwen3ForCausalLM(cfg).to(torch.float32).eval()
    randomise(model)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad).save_pretrained(tmp)


def check_vl(path: Path) -> None:
    """Reload the processor from disk: one image and one video render with their placeholders."""
    from transformers import AutoConfig, AutoProcessor

    cfg = AutoConfig.from_pretrained(path)
    assert cfg.text_config.hidden_size // cfg.text_config.num_attention_heads == TEXT_HEAD_DIM
    proc = AutoProcessor.from_pretrained(path)
    assert type(proc.image_processor).__name__.startswith("Qwen2VLImageProcessor"), type(proc.image_processor)
    assert type(proc.video_processor).__name__.startswith("Qwen2VLVideoProcessor"), type(proc.video_processor)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "What?"}]}]
    text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    want = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
            "<|vision_start|><|video_pad|><|vision_end|>What?<|im_end|>\n<|im_start|>assistant\n")
    assert text.endswith(want), text
    log("check ok: image and video placeholders render")


def check_qwen3(path: Path, heads: int = QWEN3_HEADS) -> None:
    """Reload from disk: thinking off adds the empty think block, on does not; tools render."""
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(path)
    assert cfg.max_position_embeddings == QWEN3_WINDOW and cfg.head_dim == TEXT_HEAD_DIM
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (QWEN3_LAYERS, heads, heads)
    tok = AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "user", "content": "hi"}]
    off = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    on = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=True)
    assert off == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", off
    assert on == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", on
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    convo = msgs + [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "21 C"}]
    text = tok.apply_chat_template(convo, tools=tools, tokenize=False, add_generation_prompt=True)
    for needle in ("<tools>\n<function>\n<name>get_weather</name>",
                   "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
                   "<tool_response>\n21 C\n</tool_response>"):
        assert needle in text, (needle, text)
    for token, want in zip(QWEN3_TOKENS, range(QWEN3_FIRST_ID, QWEN3_FIRST_ID + len(QWEN3_TOKENS))):
        assert tok.convert_tokens_to_ids(token) == want, (token, tok.convert_tokens_to_ids(token))
    log("check ok: enable_thinking on/off and qwen3_coder-style tools render")


def up_to_date(out: Path, build: dict[str, str]) -> bool:
    """Built by this builder version, and the weights on disk still hash to the recorded sha256
    (checked on every run, like the GGUF's: 79 MB, well under a second)."""
    try:
        stamp = json.loads((out / "qualify-build.json").read_text())
    except (OSError, ValueError):
        return False
    weights = out / "model.safetensors"
    if stamp.get("build") != build["id"] or not weights.is_file():
        return False
    return sha256_of(weights) == (build["weights_sha256"] or stamp.get("weights_sha256"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=sorted(BUILDS),
                    help="vl: tiny-qwen2.5-vl; qwen3: tiny-qwen3; qwen3-tp2: tiny-qwen3 with two heads")
    ap.add_argument("--out", required=True, type=Path, help="output model directory")
    ap.add_argument("--gguf-dir", required=True, type=Path, help="where build_cpu_model.py keeps the GGUF")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args(argv)
    build = BUILDS[args.kind]
    out: Path = args.out.expanduser().resolve()
    t0 = time.monotonic()
    if not args.force and up_to_date(out, build):
        log(f"{out} up to date ({build['id']}, weights sha256 verified) -- skipped")
        return 0
    gguf = args.gguf_dir.expanduser().resolve() / GGUF_NAME
    try:
        ensure_gguf(gguf)
    except ChecksumError:
        return 3
    tok = load_tokenizer(gguf, [] if args.kind == "vl" else QWEN3_TOKENS)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if args.kind == "vl":
        build_vl(tok, tmp)
        check_vl(tmp)
    else:
        build_qwen3(tok, tmp, QWEN3_BUILD_HEADS[args.kind])
        check_qwen3(tmp, QWEN3_BUILD_HEADS[args.kind])
    files = {p.name: sha256_of(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    weights = files["model.safetensors"]
    if build["weights_sha256"] and weights != build["weights_sha256"]:
        log(f"CHECKSUM MISMATCH: {tmp / 'model.safetensors'} sha256 {weights} != recorded {build['weights_sha256']} "
            f"(the build is meant to be deterministic; {build['id']})")
        return 3
    (tmp / "qualify-build.json").write_text(json.dumps({
        "build": build["id"],
        "weights": "random: numpy PCG64 seeded by crc32(tensor name), N(0, 0.02); norms 1, biases 0",
        "tokenizer": f"Qwen2.5 from {GGUF_NAME} (sha256 {GGUF_SHA256})",
        "weights_sha256": weights,
        "files": files,
    }, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log(f"built {out} in {time.monotonic() - t0:.1f} s (weights sha256 {weights})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
