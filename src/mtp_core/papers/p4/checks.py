"""Paper 4's config checks (`papers.p4`, before any job; the registry's `Paper.check`): what the schema cannot
express, each error naming its key."""

from __future__ import annotations

from ...config.plan import FILE_NAME
from ...config.settings import LAYER_MODEL_TYPES, ConfigError
from ...data.rows import MATH_KINDS, TRAIN_DATA_KINDS
from ...models.plan import declared_layers
from .epochs import resolve_train
from .plan import (
    QUALITY_TABLES,
    RESERVED,
    STEP_SEP,
    columns,
    figure_spec,
    launcher_settings,
    leaderboard_spec,
    overall_columns,
    run_plan,
    section,
    speed_run,
    table_runs,
    tasks,
    tf_dataset,
)


def check(config: dict) -> None:
    """Cross-references and settings the schema cannot express; raises ConfigError naming the key.

    Runs: safe names distinct from models, declared models (an architecture `mtp_core.decoding.layers` supports, with more
    layers than E + D where the config knows the count: `models.plan.declared_layers`; otherwise the training checks
    it before its first step) and datasets, merged `method` / `train` / `launcher` build, one run length
    (`train.max_steps` or `method.epochs`) no shorter than its warm-up (`epochs`; an epoch-based length is checked by
    the job once it has counted its rows). Tables, figures, speed and leaderboard name declared runs; a quality
    table's runs share one start model (one Vanilla row); the teacher-forced dataset has a validation split; τ >= 1
    everywhere (the schema)."""
    from ...evaluate.tasks import is_local_task, task_dataset
    from ...train.launch.settings import check_training
    from .settings import DMTDConfig

    s = section(config)
    models, datasets = config["models"], config["datasets"]
    runs = s.get("runs") or {}
    if not runs:
        raise ConfigError("papers.p4.runs: at least one run is needed")
    for run in runs:
        where = f"papers.p4.runs.{run}"
        if not FILE_NAME.match(run) or STEP_SEP in run:
            raise ConfigError(f"{where}: run names use letters, digits, '_', '.', '-' only")
        if run in RESERVED:
            raise ConfigError(f"{where}: `p4_{run}` is a rule of the workflow; choose another run name")
        if run in models:
            raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
        plan = run_plan(config, run)
        if plan.model not in models:
            raise ConfigError(
                f"{where}.model: model {plan.model!r} is not declared (declared: {', '.join(sorted(models))})"
            )
        if plan.dataset not in datasets or datasets[plan.dataset]["kind"] not in TRAIN_DATA_KINDS:
            raise ConfigError(
                f"{where}.dataset: {plan.dataset!r} is not a declared dataset of kind {', '.join(TRAIN_DATA_KINDS)}"
            )
        try:
            cfg = DMTDConfig.from_dict(plan.method)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}.method (merged with papers.p4.method): {e}") from None
        known = declared_layers(config, plan.model)
        if known is not None:
            kind, n_layers = known
            if kind not in LAYER_MODEL_TYPES:
                raise ConfigError(
                    f"{where}.model: {plan.model!r} is a {kind!r} model; DMTD runs layer subsets of "
                    f"{', '.join(LAYER_MODEL_TYPES)}"
                )
            try:
                cfg.spec.check(n_layers)
            except ValueError as e:
                raise ConfigError(f"{where}.method (merged with papers.p4.method): {e} ({plan.model})") from None
        try:
            train = resolve_train(plan.train, cfg.epochs, cfg.warmup_ratio, rows=None)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
        check_training(where, train, launcher_settings(config, run))

    def need_run(run: str | None, key: str) -> None:
        if run not in runs:
            raise ConfigError(f"{key}: run {run!r} is not declared in papers.p4.runs (runs: {', '.join(runs)})")

    for name in QUALITY_TABLES:
        key = f"papers.p4.tables.{name}"
        shown = table_runs(config, name)
        for i, run in enumerate(shown):
            need_run(run, f"{key}.runs[{i}]" if name != "table5" else f"{key}.run")
        starts = {run_plan(config, r).model for r in shown}
        if name != "table4" and len(starts) > 1:
            raise ConfigError(
                f"{key}: its runs start from different models ({', '.join(sorted(starts))}); "
                "one Vanilla row needs one start model (Table 4 has a block per model)"
            )
    for i, run in enumerate(figure_spec(config, "fig5").get("runs") or []):
        need_run(run, f"papers.p4.figures.fig5.runs[{i}]")
    if speed_run(config) is not None:
        need_run(speed_run(config), "papers.p4.speed.run")
    lb = leaderboard_spec(config)
    if lb.get("run"):
        need_run(lb["run"], "papers.p4.leaderboard.run")
        if lb.get("selected", True) and speed_run(config) != lb["run"]:
            raise ConfigError(
                "papers.p4.leaderboard.run: the τ choice reads the speed job, which runs papers.p4.speed.run "
                f"({speed_run(config)!r}); set both to the same run, or leaderboard.selected: false"
            )
    ds = tf_dataset(config)
    if ds not in datasets or datasets[ds]["kind"] not in MATH_KINDS:
        raise ConfigError(
            f"papers.p4.teacher_forced.dataset: {ds!r} is not a declared math dataset (it reads the validation split)"
        )
    for task in tasks(config):
        if is_local_task(task):
            try:
                task_dataset(config, task)
            except ValueError as e:
                raise ConfigError(f"papers.p4.tasks.{task}: {e}") from None
    for i, col in enumerate(overall_columns(config)):
        if col not in columns(config):
            raise ConfigError(f"papers.p4.overall[{i}]: {col!r} is not a quality column ({', '.join(columns(config))})")
