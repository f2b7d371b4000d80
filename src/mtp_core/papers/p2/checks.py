"""Paper 2's config checks, before any job (`Checks.check`), the `Checks` part of `plan.P2Plan`: what the schema
cannot express, each error naming the key. Runs: `plan`; tables, figures and speed experiments: `experiments`.
"""

from __future__ import annotations

from ...config.plan import PaperPlan
from ...config.settings import ConfigError
from ...train.launch.settings import check_training
from .experiments import FIGURES, SPEED_EXPERIMENTS, TABLES
from .settings import P2Config

RUNS = "papers.p2.runs"


class Checks(PaperPlan):
    """A base of `plan.P2Plan`: its checks, over the settings and the plan's runs and experiments."""

    def _check_pretrain_text(self, key: str, name: str) -> None:
        datasets = self.config["datasets"]
        if name not in datasets or datasets[name]["kind"] != "pretrain_text":
            raise ConfigError(f"{key}: {name!r} is not a declared pretrain_text dataset")

    def check(self) -> None:
        """What the schema cannot express, before any job; raises ConfigError naming the key.

        Models, datasets (pretrain_text, also `validation_dataset`) and prompt sets are declared; without a
        validation dataset, every run's `val_tokens` hold `validation_windows` windows; run names are not model
        names; every run's merged method and train build (P2Config with N >= 1, K >= 1, beta >= 0 ...;
        TrainConfig and the launcher's processes); extensions name an earlier run with a frozen trunk and a valid
        group, and train once (no seed enters a copy); seed replicates' names are free; every experiment names
        declared runs (speed experiments: one main, a baseline among the rows); the reference continuation reaches
        D + 1 tokens past the budget for the deepest D; leaderboard rows name declared runs (their heads' model:
        `leaderboard.plan.check`)."""
        models, runs = self.config["models"], list(self.s.runs)
        for name in self.s.prompt_sets:
            if name not in self.config["prompt_sets"]:
                raise ConfigError(f"papers.p2.prompt_sets.{name}: prompt set {name!r} is not declared")
        validation = self.s.validation_dataset
        if validation:
            self._check_pretrain_text("papers.p2.validation_dataset", validation)
        for run, r in self.s.runs.items():
            where = f"{RUNS}.{run}"
            if run in models:
                raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
            if r.extend:
                self.check_names(f"runs.{run}.extend.from", r.extend["from"], runs, "run", RUNS)
                if self.replicates(run):
                    raise ConfigError(f"{where}.seeds: an extension copies its source's heads (no seed enters it)")
            for rep in self.replicates(run):
                if rep in runs or rep in models:
                    raise ConfigError(f"{where}.seeds: its replicate {rep!r} is also a declared run or model")
            plan = self.run(run)
            self.check_names(f"runs.{run}.model", plan.model, list(models), "model", "`models`")
            self._check_pretrain_text(f"{where}.dataset", plan.dataset)
            try:
                cfg = P2Config.from_dict(plan.method)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{where}.method (merged with papers.p2.method): {e}") from None
            if not validation and self.s.validation_windows * cfg.seq_len > cfg.val_tokens:
                raise ConfigError(
                    f"{where}.method.val_tokens: {cfg.val_tokens} held-out tokens hold fewer than the "
                    f"{self.s.validation_windows} validation windows (papers.p2.validation_windows) of seq_len "
                    f"{cfg.seq_len}"
                )
            if r.extend:
                k_src = int(self.run(r.extend["from"]).method["num_heads"])
                if not 1 <= plan.extend["group"] <= k_src:
                    raise ConfigError(
                        f"{where}.extend.group: {r.extend.get('group')} heads, run {r.extend['from']!r} has {k_src}"
                    )
            tc, _ = check_training(where, plan.train, self.launcher_settings(run))
            if tc.warmup_steps >= tc.max_steps > 0:
                raise ConfigError(f"{where}.train: warmup_steps {tc.warmup_steps} >= max_steps {tc.max_steps}")
        self._check_experiments(runs)
        deepest = max(self.depths())
        if self.s.reference_extra_tokens < deepest + 1:
            raise ConfigError(
                f"papers.p2.reference_extra_tokens: {self.s.reference_extra_tokens} < {deepest + 1} (the deepest "
                "D + 1): the last step of a simulated decode compares drafts past the budget"
            )
        for i, row in enumerate(self.s.leaderboard.rows):
            self.check_names(f"leaderboard.rows[{i}].run", row.run, runs, "run", RUNS)

    def _check_experiments(self, runs: list[str]) -> None:
        for name in (*TABLES, *FIGURES):
            kind = "tables" if name in TABLES else "figures"
            for run in self.experiment_runs(name):
                self.check_names(f"{kind}.{name}", run, runs, "run", RUNS)
            if name in SPEED_EXPERIMENTS and self.configured(name):
                labels = {r["label"] for r in self.speed_rows(name)}
                if any(self.speed_baseline(name, kv) not in labels for kv in self.speed_protocols(name)):
                    raise ConfigError(f"papers.p2.{kind}.{name}.baseline: not among the rows at its own K")
            prompt_set, depth = (getattr(self.experiment(name), k, None) for k in ("prompt_set", "depth"))
            if prompt_set and prompt_set not in self.s.prompt_sets:
                raise ConfigError(f"papers.p2.{kind}.{name}.prompt_set: {prompt_set!r} is not in papers.p2.prompt_sets")
            if depth and int(depth) not in self.depths():
                raise ConfigError(f"papers.p2.{kind}.{name}.depth: {depth} is not in papers.p2.loops")
        for name in self.in_all():
            if not self.configured(name):
                raise ConfigError(f"papers.p2.in_all: {name} is not configured (papers.p2.tables / figures)")
