"""Paper 4's config checks (`papers.p4`, before any job: `Checks.check`, the base of `plan.P4Plan`): what the schema
cannot express, each error naming its key."""

from __future__ import annotations

from ...config.plan import PaperPlan
from ...config.settings import LAYER_MODEL_TYPES, ConfigError
from ...data.rows import MATH_KINDS, TRAIN_DATA_KINDS
from ...models.plan import declared_layers
from .epochs import resolve_train
from .settings import QUALITY_TABLES, RESERVED, DMTDConfig


class Checks(PaperPlan):
    """The base of `plan.P4Plan`: its checks, over the settings and the plan's methods."""

    def check(self) -> None:
        """The cross-references and settings the schema cannot express; raises ConfigError naming the key.

        Runs: names distinct from models and rules (the schema keeps them to file-name characters), declared models (an
        architecture `mtp_core.decoding.layers` supports, with more layers than E + D where the config knows the count:
        `models.plan.declared_layers`; otherwise the training checks it before its first step) and datasets, merged
        `method` / `train` / `launcher` build, one run length (`train.max_steps` or `method.epochs`) no shorter than its
        warm-up (`epochs`; an epoch-based length is checked by the job once it has counted its rows). Tables, figures,
        speed and leaderboard name declared runs; a quality table's runs share one start model (one Vanilla row); the
        teacher-forced dataset has a validation split; τ >= 1 everywhere (the schema)."""
        from ...evaluate.tasks import is_local_task, task_dataset
        from ...train.launch.settings import check_training

        config, s = self.config, self.s
        models, datasets = config["models"], config["datasets"]
        runs = s.runs
        if not runs:
            raise ConfigError("papers.p4.runs: at least one run is needed")
        for run in runs:
            where = f"papers.p4.runs.{run}"
            if run in RESERVED:
                raise ConfigError(f"{where}: `p4_{run}` is a rule of the workflow; choose another run name")
            if run in models:
                raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
            rp = self.run_plan(run)
            if rp.model not in models:
                raise ConfigError(
                    f"{where}.model: model {rp.model!r} is not declared (declared: {', '.join(sorted(models))})"
                )
            if rp.dataset not in datasets or datasets[rp.dataset]["kind"] not in TRAIN_DATA_KINDS:
                raise ConfigError(
                    f"{where}.dataset: {rp.dataset!r} is not a declared dataset of kind {', '.join(TRAIN_DATA_KINDS)}"
                )
            try:
                cfg = DMTDConfig.from_dict(rp.method)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{where}.method (merged with papers.p4.method): {e}") from None
            known = declared_layers(config, rp.model)
            if known is not None:
                kind, n_layers = known
                if kind not in LAYER_MODEL_TYPES:
                    raise ConfigError(
                        f"{where}.model: {rp.model!r} is a {kind!r} model; DMTD runs layer subsets of "
                        f"{', '.join(LAYER_MODEL_TYPES)}"
                    )
                try:
                    cfg.spec.check(n_layers)
                except ValueError as e:
                    raise ConfigError(f"{where}.method (merged with papers.p4.method): {e} ({rp.model})") from None
            try:
                train = resolve_train(rp.train, cfg.epochs, cfg.warmup_ratio, rows=None)
            except ValueError as e:
                raise ConfigError(f"{where}: {e}") from None
            check_training(where, train, self.launcher_settings(run))

        def need_run(run: str | None, key: str) -> None:
            if run not in runs:
                raise ConfigError(f"{key}: run {run!r} is not declared in papers.p4.runs (runs: {', '.join(runs)})")

        for name in QUALITY_TABLES:
            key = f"papers.p4.tables.{name}"
            shown = self.table_runs(name)
            for i, run in enumerate(shown):
                need_run(run, f"{key}.runs[{i}]" if name != "table5" else f"{key}.run")
            starts = {self.run_plan(r).model for r in shown}
            if name != "table4" and len(starts) > 1:
                raise ConfigError(
                    f"{key}: its runs start from different models ({', '.join(sorted(starts))}); "
                    "one Vanilla row needs one start model (Table 4 has a block per model)"
                )
        for i, run in enumerate(s.figures.fig5.runs):
            need_run(run, f"papers.p4.figures.fig5.runs[{i}]")
        if s.speed.run is not None:
            need_run(s.speed.run, "papers.p4.speed.run")
        lb = s.leaderboard
        if lb.run:
            need_run(lb.run, "papers.p4.leaderboard.run")
            if lb.selected and s.speed.run != lb.run:
                raise ConfigError(
                    "papers.p4.leaderboard.run: the τ choice reads the speed job, which runs papers.p4.speed.run "
                    f"({s.speed.run!r}); set both to the same run, or leaderboard.selected: false"
                )
        ds = self.tf_dataset()
        if ds not in datasets or datasets[ds]["kind"] not in MATH_KINDS:
            raise ConfigError(
                f"papers.p4.teacher_forced.dataset: {ds!r} is not a declared math dataset (it reads the validation split)"
            )
        for task in self.tasks():
            if is_local_task(task):
                try:
                    task_dataset(config, task)
                except ValueError as e:
                    raise ConfigError(f"papers.p4.tasks.{task}: {e}") from None
        for i, col in enumerate(self.overall_columns()):
            if col not in self.columns():
                raise ConfigError(
                    f"papers.p4.overall[{i}]: {col!r} is not a quality column ({', '.join(self.columns())})"
                )
