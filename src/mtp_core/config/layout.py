"""The layout of `results/`, in one place: every path a rule writes or a plan names is built here.

    results/data/<dataset>/<split>.jsonl                   prepared splits (and shards/, split_report.json)
    results/prompts/<prompt set>.jsonl                     prompt sets
    results/models/<paper>/<run>/                          a training run (model/, train.json, curves.csv, ...)
    results/decode/<paper>/<run>/<task>/<setting>.json     a decoding or evaluation result (+ .samples.jsonl);
                                                           a prompt set's task is `prompts-<set>`
    results/analysis/<paper>/<name>/...                    a paper's analyses (alignment, frontiers, tau choice)
    results/tables/<paper>/<name>.{csv,md}                 tables ("base", "p1".., "leaderboard")
    results/figures/<paper>/<name>.{png,pdf}               figures
    results/logs/..., results/benchmarks/...               job logs and Snakemake `benchmark:` files (the job
                                                           costs), named by each rule beside its outputs

Paths are relative to the workflow's directory (Snakemake's working directory); `root` moves them elsewhere.
"""

from __future__ import annotations

RESULTS = "results"


def data_dir(dataset: str, root: str = RESULTS) -> str:
    """A prepared dataset's folder: its splits, `shards/`, `split_report.json`."""
    return f"{root}/data/{dataset}"


def data_split(dataset: str, split: str, root: str = RESULTS) -> str:
    return f"{data_dir(dataset, root)}/{split}.jsonl"


def prompts(prompt_set: str, root: str = RESULTS) -> str:
    return f"{root}/prompts/{prompt_set}.jsonl"


def prompts_task(prompt_set: str) -> str:
    """The task folder of a prompt set's results: `prompts-<set>`."""
    return f"prompts-{prompt_set}"


def run_dir(paper: str, run: str, root: str = RESULTS) -> str:
    """A training run's folder: `results/models/<paper>/<run>`."""
    return f"{root}/models/{paper}/{run}"


def decode_result(paper: str, run: str, task: str, setting: str, root: str = RESULTS) -> str:
    """One decoding or evaluation result: `results/decode/<paper>/<run>/<task>/<setting>.json`."""
    return f"{root}/decode/{paper}/{run}/{task}/{setting}.json"


def analysis_dir(paper: str, name: str, root: str = RESULTS) -> str:
    return f"{root}/analysis/{paper}/{name}"


def table_files(paper: str, name: str, root: str = RESULTS) -> list[str]:
    """The files of table `name` of `paper` (CSV, then markdown)."""
    return [f"{root}/tables/{paper}/{name}.csv", f"{root}/tables/{paper}/{name}.md"]


def figure_files(paper: str, name: str, root: str = RESULTS) -> list[str]:
    """The files of figure `name` of `paper` (PNG, then PDF)."""
    return [f"{root}/figures/{paper}/{name}.png", f"{root}/figures/{paper}/{name}.pdf"]
