# One command to run the main job, one to run the tests; both set up .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip

.PHONY: profile test venv-cpu venv-test bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The CPU extra builds llama-cpp-python from source the first time (5 to 7 minutes on 2 cores).
$(VENV)/.cpu: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[cpu]'
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[cpu,dev,ray]'
	touch $@ $(VENV)/.cpu

venv-cpu: $(VENV)/.cpu
venv-test: $(VENV)/.test

profile: $(VENV)/.cpu
	$(BIN)/difficulty profile

test: $(VENV)/.test
	$(BIN)/python -m pytest -q

bench: $(VENV)/.test
	$(BIN)/python bench/analysis.py
	$(BIN)/python bench/grading.py
	$(BIN)/python bench/sampling.py

lint: $(VENV)/.test
	$(BIN)/ruff check pipeline tests bench

clean:
	rm -rf $(VENV) difficulty-data
