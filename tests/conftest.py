"""Shared fixtures and builders: tiny random models (Llama and Qwen3) prepared once per session, offline, their
specs (`tiny_spec`) and random prompts (`random_prompts`)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the launcher's jobs (subprocesses, Slurm tasks) import the tests' own training method (`tests.toy_method`)
_ROOT = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
# tiny models gain nothing from threads, and one thread keeps the suite fast when the machine is shared
torch.set_num_threads(1)


def _group(item: pytest.Item) -> str:
    """The unit of work of one pytest-xdist worker (`make test`: `-n 2 --dist loadgroup`): the tests of the
    shared tiny-scale `all` run together (its session fixture runs once), so do those of the shared dry runs
    (`dry_run`), the Slurm tests (one cluster) and every other module's tests (their module and session fixtures
    run once)."""
    for shared in ("tiny_run", "dry_run", "rehearsal"):
        if shared in item.fixturenames:
            return shared
    if item.get_closest_marker("slurm"):
        return "slurm"
    return item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """The tiny-scale `all` first (on one worker while the other takes the rest), the Slurm tests last, the
    paper-scale rehearsal among them on a worker of its own (run beside the tiny `all`, the two slowed each other
    past 45 min on 2 cores); under `make test` the cluster starts in the background meanwhile."""
    rank = {"tiny_run": 0, "rehearsal": 2, "slurm": 2}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
        if {"tiny_run", "rehearsal"} & set(item.fixturenames):
            item.add_marker(pytest.mark.e2e)
        if "traced" in item.fixturenames:
            item.add_marker(pytest.mark.compiled)
    items.sort(key=lambda item: rank.get(_group(item), 1))


_SLURM_SECONDS: list[float] = []


# the summary hooks live here, not in tests/slurm/conftest.py: under pytest-xdist the controller, which reports,
# loads no conftest below tests/
def pytest_runtest_logreport(report):
    if "slurm" in report.keywords and report.when in ("setup", "call", "teardown"):
        _SLURM_SECONDS.append(report.duration)


def pytest_terminal_summary(terminalreporter):
    if _SLURM_SECONDS:
        terminalreporter.write_line(f"[slurm-ci] Slurm tests took {sum(_SLURM_SECONDS):.1f} s")


@pytest.fixture
def one_thread():
    """One intra-op thread during the test, restored after it (code under test may set the thread count)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def traced(monkeypatch):
    """`backend: compiled` traced with `aot_eager`: the graph a job compiles, without building kernels (seconds, not
    minutes). `MTP_TRACE_BACKEND=inductor` builds inductor's kernels instead, as a job does (docs/development.md)."""
    from mtp_core.decoding import static

    monkeypatch.setattr(static, "COMPILE_BACKEND", os.environ.get("MTP_TRACE_BACKEND", "aot_eager"))


@pytest.fixture(scope="module")
def datasets_cache_in_tmp(tmp_path_factory):
    """`datasets` writes the Arrow caches of the module's local datasets under a temporary folder, not into the
    user's cache (`mtp_core.data.records.local_cache_dir` names a new one for every folder written)."""
    import datasets

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf_datasets_cache"))
        yield


REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

TINY_SPEC = {
    "source": "tiny",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "init_seed": 0,
    "chat_template": True,
    "dtype": "float32",
}


def tiny_spec(arch: str = "llama", **overrides) -> dict:
    return {**TINY_SPEC, "arch": arch, "name": f"tiny-{arch}", **overrides}


PROMPT_WORDS = ("the", "cat", "sat", "on", "a", "mat", "while", "seven", "dogs", "ran", "past", "quickly", "and", "x",
                "y", "z", "12", "+", "7", "=")  # fmt: skip


def random_prompts(
    tok, n: int, seed: int, *, words=PROMPT_WORDS, lengths=(1, 12), distinct_lengths: bool = False
) -> list[list[int]]:
    """n token-id prompts of `lengths[0]`..`lengths[1]` words drawn from `words` (seeded); with `distinct_lengths`
    pairwise different token lengths (a batch whose rows all pad differently)."""
    rng = random.Random(seed)
    out: list[list[int]] = []
    while len(out) < n:
        ids = tok(" ".join(rng.choices(list(words), k=rng.randint(*lengths)))).input_ids
        if not distinct_lengths or all(len(ids) != len(q) for q in out):
            out.append(ids)
    return out


@pytest.fixture(scope="session", params=["llama", "qwen3"])
def tiny_loaded(request, tmp_path_factory):
    """A prepared and loaded tiny model of each architecture."""
    from mtp_core.models.load import load_model, prepare_base_model

    spec = tiny_spec(request.param)
    d = prepare_base_model(spec, tmp_path_factory.mktemp(f"tiny-{request.param}") / "model")
    return load_model(spec, base_dir=d)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    from mtp_core.models.load import load_model, prepare_base_model

    spec = tiny_spec("llama")
    d = prepare_base_model(spec, tmp_path_factory.mktemp("tiny-llama-only") / "model")
    return load_model(spec, base_dir=d)


def job_counts(out: str) -> dict[str, int]:
    """Rule -> job count from the job-stats table of a `snakemake -n` output."""
    counts = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts
