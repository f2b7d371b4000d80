"""Paper 5's config checks (`Checks.check`, run before any job): the cross-references and settings the JSON schema
(`p5.schema.yaml`) cannot express, over the plan's settings (`Checks` is the base of `plan.P5Plan`).
"""

from __future__ import annotations

from ...config.plan import PaperPlan
from ...config.settings import ConfigError
from ...decoding.catalog import check_decoder, decoder_names
from ...decoding.tree import published_trees
from ...io import InputError
from .frontier import search_stop
from .scheduler import POLICIES, feature_depth
from .settings import FrontierSettings, HeadsTrainConfig, TasksFigure, rows_needed

HUMANEVAL_PROBLEMS = 164


class Checks(PaperPlan):
    """The base of `plan.P5Plan`: its checks, which read the settings through its methods (`search_heads`,
    `heads_module`, `frontier_settings`)."""

    def check(self) -> None:
        """Cross-references and settings JSON schema cannot express (raises ConfigError naming the key): the model
        and math datasets are declared; splits fit their pools (HumanEval: 164 problems; more would overlap) and no
        two tasks share a pool; trained heads' training settings build with their launcher; heads predict at least
        as deep as the searched depths, the published default tree and the score feature; methods name registered
        decoders with known parameters, declared heads, published trees, and EntMTP's heads are searched;
        τ_off <= τ_on; budgets give non-empty windows; the verification prices reach the widest tree the search
        grows or prices (`settings.rows_needed`: int(max budget x (1 + tolerance)) nodes, the default tree's, plus
        the root row); tables, figures and the leaderboard name declared tasks and methods (the rows' heads' model:
        `leaderboard.plan.check`). The frontier's engine needs no check: it follows the decoding regime
        (`P5Plan.search_engine`), so a bank is never chosen in another regime than its decoders'."""
        from ...train.launch.settings import check_training

        s, datasets = self.s, self.config["datasets"]
        self.check_names("model", s.model, list(self.config["models"]), "model", "`models`")
        pools: dict[tuple, str] = {}
        for t, task in s.tasks.items():
            key = f"{self.key}.tasks.{t}"
            if (task.source, task.dataset) in pools:
                other = pools[task.source, task.dataset]
                raise ConfigError(f"{key}: draws from the same prompts as task {other!r}: their splits would overlap")
            pools[task.source, task.dataset] = t
            if task.source == "math":
                self.check_names(f"tasks.{t}.dataset", task.dataset, list(datasets), "dataset", "`datasets`")
                if datasets[task.dataset]["kind"] not in ("synthetic_math", "metamathqa"):
                    raise ConfigError(f"{key}.dataset: {task.dataset!r} is not a math dataset")
            n = task.test + task.calib + task.train
            if task.source == "humaneval" and n > HUMANEVAL_PROBLEMS:
                raise ConfigError(
                    f"{key}: test + calib + train = {n} prompts exceed HumanEval's {HUMANEVAL_PROBLEMS} problems: "
                    "the splits would overlap"
                )
        fs = self._frontier_settings()
        deepest, searched = max(fs.depths), self.search_heads()
        tree_depths = {n: max(len(p) for p in t) for n, t in published_trees().items()}
        for h, spec in s.heads.items():
            key = f"{self.key}.heads.{h}"
            if spec.source == "train":
                try:
                    HeadsTrainConfig.from_dict(self.heads_module(h))
                except (TypeError, ValueError) as e:
                    raise ConfigError(f"{key}: {e}") from None
                check_training(key, {**spec.train, "final_dir": "heads"}, self.launcher_settings(h, "heads"))
            elif spec.id is None and spec.path is None:
                raise ConfigError(f"{key}: source {spec.source} needs `id` (hub) or `path` (local)")
            k = spec.num_heads
            if h in searched:
                if k < deepest:
                    raise ConfigError(
                        f"{key}.num_heads: {k} heads, fewer than the search depth {deepest} (search.depths)"
                    )
                if feature_depth(fs.score_feature) > k:
                    raise ConfigError(
                        f"{self.key}.scheduler.score_feature: {fs.score_feature} reads more than {k} heads"
                    )
        heads, tasks, methods = list(s.heads), list(s.tasks), list(s.methods)
        self.check_names("search.heads", searched, heads, "heads", "papers.p5.heads")
        if fs.default_tree not in tree_depths:
            raise ConfigError(f"{self.key}.search.default_tree: no published tree {fs.default_tree!r}")
        for b in fs.budgets:
            lo, hi = int(b * (1 - fs.tolerance)), int(b * (1 + fs.tolerance))
            if hi < 2 or hi < lo:  # searched trees have 2 nodes or more (the 1-node start is not a row)
                raise ConfigError(
                    f"{self.key}.search.budgets: budget {b} with tolerance {fs.tolerance} has no window "
                    f"([{lo}, {hi}] holds no searched tree: they have 2 nodes or more)"
                )
        default_nodes = len(published_trees()[fs.default_tree])
        need, max_rows = rows_needed(fs.budgets, fs.tolerance, [default_nodes]), s.throughput.max_rows
        if max_rows < need:
            raise ConfigError(
                f"{self.key}.throughput.max_rows: {max_rows} rows priced, but the search grows trees to "
                f"{search_stop(fs.budgets, fs.tolerance)} nodes (int(max budget x (1 + tolerance))) and the default "
                f"tree {fs.default_tree} has {default_nodes}: their verification needs {need} rows (set max_rows >= {need})"
            )
        for label, m in s.methods.items():
            key = f"{self.key}.methods.{label}"
            if m["decoder"] not in decoder_names():
                raise ConfigError(f"{key}.decoder: decoder {m['decoder']!r} is not registered")
            if "heads" in m:
                self.check_names(f"methods.{label}.heads", m["heads"], heads, "heads", "papers.p5.heads")
            tree = m.get("tree")
            if isinstance(tree, str):
                if tree not in tree_depths:
                    raise ConfigError(f"{key}.tree: no published tree {tree!r} ({', '.join(sorted(tree_depths))})")
                k = s.heads[m["heads"]].num_heads if "heads" in m else 0
                if tree_depths[tree] > k:
                    raise ConfigError(
                        f"{key}: tree {tree} is {tree_depths[tree]} deep, heads {m['heads']!r} predict {k}"
                    )
            if m["decoder"] == "entmtp":
                if m.get("heads") not in searched:
                    raise ConfigError(f"{key}.heads: EntMTP reads the bank of searched heads (papers.p5.search.heads)")
                if m.get("policy", "binary_tau") not in POLICIES:
                    raise ConfigError(f"{key}.policy: one of {', '.join(POLICIES)}")
                on, off = m.get("tau_on", m.get("tau")), m.get("tau_off", m.get("tau"))
                if on is not None and off is not None and float(off) > float(on):
                    raise ConfigError(f"{key}: tau_off {off} > tau_on {on} (the hysteresis needs tau_off <= tau_on)")
            try:
                check_decoder(label, {k: v for k, v in m.items() if k != "title"})
            except InputError as e:
                raise ConfigError(f"{key}: {e}") from None
        if any(f > 1 for f in fs.hysteresis):
            raise ConfigError(f"{self.key}.scheduler.hysteresis: factors > 1 would make tau_off > tau_on")
        for name in self.TABLES:
            self.check_names(f"tables.{name}.tasks", getattr(s.tables, name).tasks, tasks, "task", "papers.p5.tasks")
        self.check_names("tables.table1.methods", s.tables.table1.methods, methods, "method", "papers.p5.methods")
        for name in self.FIGURES:
            fig = getattr(s.figures, name)
            where, shown = ("tasks", fig.tasks) if isinstance(fig, TasksFigure) else ("task", fig.task)
            self.check_names(f"figures.{name}.{where}", shown, tasks, "task", "papers.p5.tasks")
        if s.leaderboard.methods:  # the schema requires its task then
            self.check_names("leaderboard.task", s.leaderboard.task, tasks, "task", "papers.p5.tasks")
            self.check_names("leaderboard.methods", s.leaderboard.methods, methods, "method", "papers.p5.methods")

    def _frontier_settings(self) -> FrontierSettings:
        try:
            return self.frontier_settings()
        except ValueError as e:
            raise ConfigError(f"{self.key}: {e}") from None
