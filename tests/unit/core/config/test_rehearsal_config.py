"""config/rehearsal.yaml changes sizes only: merged over config/paper.yaml as Snakemake merges config files, every
value it changes is a size (steps, rows, prompts, tokens, widths, process counts, run lists), and every training
keeps the paper config's strategy and dtypes on 2 processes. The run itself is tests/slurm/test_rehearsal.py."""

from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.utils import update_config

from mtp_core.config.plan import launcher_settings
from mtp_core.config.settings import validate_schema
from tests.conftest import REPO

# Leaf keys whose values are sizes: how much, how long, how wide, how many processes, which runs and tasks a table
# lists (the run lists the README's "Paper scale" section names as cut).
SIZE_KEYS = {
    # compute and budgets
    "threads",
    "warmup",
    "repeats",
    "max_steps",
    "global_batch_size",
    "micro_batch_size",
    "warmup_steps",
    "checkpoint_every",
    "log_every",
    "progress",
    "save_steps",
    "poll_s",
    "progress_s",
    "nodes",
    "tasks_per_node",
    "gpus_per_node",
    "cpus_per_task",
    "mem_gb",
    # model widths (p2's scratch models)
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
    "num_experts",
    "expert_hidden_size",
    "top_k",
    "num_shared_experts",
    "dense_layers",
    # data and prompts
    "max_tokens",
    "shard_tokens",
    "validation_fraction",
    "n",
    "rows",
    "test",
    "calib",
    "per_set",
    "per_category",
    "math",
    "code",
    "conversation",
    "specbench",
    "validation_windows",
    "val_tokens",
    "seq_len",
    "max_new_tokens",
    "batch_size",
    "limit",
    "max_gen_toks",
    "prompt_tokens",
    "new_tokens",
    "prompts",
    "batch_sizes",
    "bins",
    # sweeps and run lists
    "static_k",
    "taus",
    "steps",
    "budgets",
    "loops",
    "runs",
    "prompt_sets",
    "tasks",
    "methods",
    "models",
    "blocks",
    "groups",
    "baseline",
    "run",
    "task",
    "model",
    "bcs",
}
SIZE_SECTIONS = {"hub_mirror"}  # new: the stand-ins themselves


def _yaml(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def _merged() -> dict:
    config = copy.deepcopy(_yaml("config/paper.yaml"))
    update_config(config, _yaml("config/rehearsal.yaml"))  # Snakemake's own merge of --configfile a b
    return config


def _changed(old, new, path=()):
    """Paths of the leaves (or whole lists) that differ between two configs (a section one side lacks is empty)."""
    if {type(old), type(new)} <= {dict, type(None)} and old != new:
        old, new = old or {}, new or {}
        for k in sorted(set(old) | set(new), key=str):
            yield from _changed(old.get(k), new.get(k), (*path, k))
    elif old != new:
        yield path


def _allowed(path: tuple) -> bool:
    if path[0] in SIZE_SECTIONS:
        return True
    # only the changed key itself counts (a run's `method` under `runs` is not a size); a group of a table lists runs
    return str(path[-1]) in SIZE_KEYS or (len(path) >= 2 and path[-2] == "groups")


def test_rehearsal_changes_sizes_only():
    paper, merged = _yaml("config/paper.yaml"), _merged()
    validate_schema(paper), validate_schema(merged)  # defaults filled; the hub rewrite is hub_mirror's own test
    changed = list(_changed(paper, merged))
    assert changed, "the rehearsal changes nothing?"
    not_sizes = [".".join(map(str, p)) for p in changed if not _allowed(p)]
    assert not not_sizes, f"config/rehearsal.yaml changes more than sizes: {not_sizes}"


def test_the_size_check_catches_a_swapped_code_path():
    merged = _merged()
    for path, value in [
        (("papers", "p2", "launcher", "strategy"), "ddp"),
        (("papers", "p5", "decoding", "temperature"), 0.0),
        (("models", "qwen3-4b", "dtype"), "float32"),
        (("papers", "p1", "method", "loss"), {"objective": "gt"}),
    ]:
        bad = copy.deepcopy(merged)
        node = bad
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        assert any(not _allowed(p) for p in _changed(_yaml("config/paper.yaml"), bad)), path


def _training_runs(config: dict) -> list[tuple[str, str]]:
    return [(p, r) for p in ("p1", "p2", "p4") for r in (config["papers"][p].get("runs") or {})]


@pytest.mark.parametrize("paper,run", _training_runs(_yaml("config/paper.yaml")))
def test_every_training_keeps_its_strategy_and_dtypes_on_two_processes(paper, run):
    want = launcher_settings(_yaml("config/paper.yaml"), paper, run)
    got = launcher_settings(_merged(), paper, run)
    for key in ("strategy", "fsdp_param_dtype", "fsdp_reduce_dtype", "cluster", "backend", "device"):
        assert got.get(key) == want.get(key), key
    assert got["nodes"] * got["tasks_per_node"] == 2 and got["gpus_per_node"] == 0
