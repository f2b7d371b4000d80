"""Paper 2's config checks, before any job (`Paper.check`): what the schema cannot express, each error naming the
key. Runs: `plan`; tables, figures and speed experiments: `experiments`.
"""

from __future__ import annotations

from ...config.plan import FILE_NAME
from ...config.settings import ConfigError
from . import experiments as ex
from .plan import (
    depths,
    launcher_settings,
    max_depth,
    prompt_sets,
    replicates,
    run_plan,
    section,
)


def check(config: dict) -> None:
    """What the schema cannot express, before any job; raises ConfigError naming the key.

    Models, datasets (pretrain_text) and prompt sets are declared; run names are safe and not model names; every
    run's merged method and train build (P2Config with N >= 1, K >= 1, beta >= 0 ...; TrainConfig and the
    launcher's processes); extensions name an earlier run with a frozen trunk and a valid group, and train once
    (no seed enters a copy); seed replicates' names are free; every experiment names declared runs (speed
    experiments: one main, a baseline among the rows); the reference continuation reaches D + 1 tokens past the
    budget for the deepest D; leaderboard rows name declared runs (their heads' model: `leaderboard.plan.check`)."""
    from ...train.launch.settings import check_training
    from .settings import P2Config

    s = section(config)
    models, datasets = config["models"], config["datasets"]
    runs = s.get("runs") or {}
    if not runs:
        raise ConfigError("papers.p2.runs: at least one run is needed")
    for name in prompt_sets(config):
        if name not in config["prompt_sets"]:
            raise ConfigError(f"papers.p2.prompt_sets.{name}: prompt set {name!r} is not declared")
    for run in runs:
        where = f"papers.p2.runs.{run}"
        if not FILE_NAME.match(run):
            raise ConfigError(f"{where}: run names use letters, digits, '_', '.', '-' only")
        if run in models:
            raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
        ext = (runs[run] or {}).get("extend")
        if ext and ext["from"] not in runs:
            raise ConfigError(f"{where}.extend.from: run {ext['from']!r} is not declared in papers.p2.runs")
        if ext and replicates(config, run):
            raise ConfigError(f"{where}.seeds: an extension copies its source's heads (no seed enters it)")
        for rep in replicates(config, run):
            if rep in runs or rep in models:
                raise ConfigError(f"{where}.seeds: its replicate {rep!r} is also a declared run or model")
        plan = run_plan(config, run)
        if plan.model not in models:
            raise ConfigError(f"{where}.model: model {plan.model!r} is not declared")
        if plan.dataset not in datasets or datasets[plan.dataset]["kind"] != "pretrain_text":
            raise ConfigError(f"{where}.dataset: {plan.dataset!r} is not a declared pretrain_text dataset")
        try:
            P2Config.from_dict(plan.method)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}.method (merged with papers.p2.method): {e}") from None
        if ext:
            k_src = int(run_plan(config, ext["from"]).method.get("num_heads", 1))
            if not 1 <= plan.extend["group"] <= k_src:
                raise ConfigError(f"{where}.extend.group: {ext.get('group')} heads, run {ext['from']!r} has {k_src}")
        tc, _ = check_training(where, plan.train, launcher_settings(config, run))
        if tc.warmup_steps >= tc.max_steps > 0:
            raise ConfigError(f"{where}.train: warmup_steps {tc.warmup_steps} >= max_steps {tc.max_steps}")
    _check_experiments(config, runs)
    extra = int(s.get("reference_extra_tokens") or 0)
    if extra < max_depth(config) + 1:
        raise ConfigError(
            f"papers.p2.reference_extra_tokens: {extra} < {max_depth(config) + 1} (the deepest D + 1): the last "
            "step of a simulated decode compares drafts past the budget"
        )
    for i, r in enumerate((s.get("leaderboard") or {}).get("rows", [])):
        key = f"papers.p2.leaderboard.rows[{i}]"
        if r["run"] not in runs:
            raise ConfigError(f"{key}.run: run {r['run']!r} is not declared in papers.p2.runs")


def _check_experiments(config: dict, runs: dict) -> None:
    for name in (*ex.TABLES, *ex.FIGURES):
        kind = "tables" if name in ex.TABLES else "figures"
        for run in ex.experiment_runs(config, name):
            if run not in runs:
                raise ConfigError(f"papers.p2.{kind}.{name}: run {run!r} is not declared in papers.p2.runs")
        if name in ex.SPEED_EXPERIMENTS and ex.configured(config, name):
            labels = {r["label"] for r in ex.speed_rows(config, name)}
            if any(ex.speed_baseline(config, name, kv) not in labels for kv in ex.speed_protocols(config, name)):
                raise ConfigError(f"papers.p2.{kind}.{name}.baseline: not among the rows at its own K")
        spec = ex.experiment_spec(config, name)
        if spec.get("prompt_set") and spec["prompt_set"] not in prompt_sets(config):
            raise ConfigError(
                f"papers.p2.{kind}.{name}.prompt_set: {spec['prompt_set']!r} is not in papers.p2.prompt_sets"
            )
        if spec.get("depth") and int(spec["depth"]) not in depths(config):
            raise ConfigError(f"papers.p2.{kind}.{name}.depth: {spec['depth']} is not in papers.p2.loops")
    for name in ex.targets_in_all(config):
        if not ex.configured(config, name):
            raise ConfigError(f"papers.p2.in_all: {name} is not ex.configured (papers.p2.tables / figures)")
