"""Paper 1's experiment plan: the validated `papers.p1` section (`P1Settings`) turned into training runs, decoder
sweeps, evaluation jobs, tables and figures. The rules (`workflow/rules/p1.smk`), the launcher (`resolve_training`) and
the tests read it, so that the rules stay declarative; the scripts get what they need as rule params.

Names (all derived here, nowhere else):

* **Runs.** `papers.p1.runs.<name>` overrides the shared `model`, `dataset`, `method` (`P1Config` keys) and
  `train` (`TrainConfig` keys), merged key by key (`config.plan`). `main` is the paper's main recipe; the ablations
  of Tables 3-5 are further runs. A run's folder `results/models/p1/<run>/` holds `train.json` (the launcher's
  record), `model/` (the final student) and `exports/step-0000000N/`.
* **Run labels** of evaluations: `<run>` is the final model (`results/models/p1/<run>/model`), `<run>@step<N>`
  the export at step N (`exports/step-0000000N`, training dynamics, Figs 7-8 and 10-11), and
  `<model>@step0` the base model itself (the tables' "Baseline Step 0, k=1" row, greedy decoding).
  Run names may not contain `@` (the schema) and may not equal a model name, so the three never collide.
* **Decoder labels** (one result file each): `static-k<k>` (`{decoder: static-k, k}`) and
  `conf-adapt-tau<tau>` (`{decoder: conf-adapt, tau, k_max}`), in the tables' row order: Static k ascending,
  then ConfAdapt with tau descending.
* **Result files**: `results/decode/p1/<run label>/<task>/<decoder label>.json` (+ `.samples.jsonl`); Figure 6's
  analysis `results/analysis/p1/<run>/confidence.{csv,json}`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...config import layout
from ...config.plan import PaperPlan, RunPlan
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError
from ...data.rows import MATH_KINDS, TRAIN_DATA_KINDS
from ...evaluate import EvalSettings
from ...train.config import step_dir_name
from ...train.finetune import rows_training_inputs, rows_training_settings

STEP_SEP = "@step"
TABLES = ("table1", "table2", "table3", "table4", "table5")
PARETO_FIGURES = ("fig5", "fig9")
DYNAMICS_FIGURES = ("fig7", "fig8", "fig10", "fig11")
CONFIDENCE_FIGURE = "fig6"
FIGURES = ("fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11")
BASELINE_DECODER = "greedy"
EVAL_KEYS = ("limit", "batch_size", "max_gen_toks", "until", "apply_chat_template", "num_fewshot", "bootstrap_iters")


@dataclass(frozen=True)
class ConfAdapt:
    taus: list[float]
    k_max: int


@dataclass(frozen=True)
class Decoding:
    static_k: list[int]
    conf_adapt: ConfAdapt


@dataclass(frozen=True)
class Table:
    runs: list[str]
    tasks: list[str]


@dataclass(frozen=True)
class ParetoFigure:
    runs: list[str]
    task: str


@dataclass(frozen=True)
class DynamicsFigure:
    run: str
    task: str


@dataclass(frozen=True)
class ConfidenceFigure:
    run: str
    rows: int
    k: int | None  # null: the run's k_max
    batch_size: int
    bins: int
    seed: int


@dataclass(frozen=True)
class Figures:
    fig5: ParetoFigure
    fig6: ConfidenceFigure
    fig7: DynamicsFigure
    fig8: DynamicsFigure
    fig9: ParetoFigure
    fig10: DynamicsFigure
    fig11: DynamicsFigure


@dataclass(frozen=True)
class Checkpoints:
    steps: list[int]
    static_k: list[int] | None  # null: decoding.static_k
    taus: list[float] | None  # null: decoding.conf_adapt.taus


@dataclass(frozen=True)
class Leaderboard:
    run: str | None  # null: no rows
    static_k: list[int]
    taus: list[float]


@dataclass(frozen=True)
class P1Settings:
    """`papers.p1` (workflow/schemas/p1.schema.yaml, which holds every default)."""

    enabled: bool
    model: str
    dataset: str
    mask_seed: int
    method: dict[str, Any]  # P1Config keys
    train: dict[str, Any]  # TrainConfig keys
    launcher: dict[str, Any]
    runs: dict[str, dict[str, Any]]  # a run's overrides (`PaperPlan.run`)
    decoding: Decoding
    evaluation: dict[str, Any]  # `dtype` and overrides of the foundation's `evaluation` (absent keys inherit it)
    tasks: dict[str, dict[str, Any]]  # per task: `metric` and overrides of the evaluation settings
    tables: dict[str, Table]
    figures: Figures
    checkpoints: Checkpoints
    leaderboard: Leaderboard
    in_all: list[str] | None


def checkpoint_label(run: str, step: int | str) -> str:
    return f"{run}{STEP_SEP}{int(step)}"


def baseline_label(model: str) -> str:
    """Run label of the step-0 baseline of base model `model`."""
    return f"{model}{STEP_SEP}0"


def parse_label(label: str) -> tuple[str, int | None]:
    """`main@step40` -> ("main", 40); `main` -> ("main", None)."""
    name, sep, step = label.partition(STEP_SEP)
    if sep and step.isdigit():
        return name, int(step)
    return label, None


def static_label(k: int) -> str:
    return f"static-k{int(k)}"


def conf_label(tau: float) -> str:
    return f"conf-adapt-tau{float(tau):g}"


def static_params(k: int) -> dict[str, Any]:
    return {"decoder": "static-k", "k": int(k)}


def conf_params(tau: float, k_max: int) -> dict[str, Any]:
    return {"decoder": "conf-adapt", "tau": float(tau), "k_max": int(k_max)}


@dataclass(frozen=True)
class EvalJob:
    """One evaluation job: a run label (final, checkpoint or baseline) on one task, with its decoder sweep."""

    label: str
    task: str
    kind: str  # "final" | "checkpoint" | "baseline"

    @property
    def run(self) -> str:
        return parse_label(self.label)[0]


class P1Plan(PaperPlan):
    paper = "p1"
    Settings = P1Settings
    TABLES = TABLES
    FIGURES = FIGURES
    TRAIN_METHOD = "p1"
    BASELINE_DECODER = BASELINE_DECODER
    checkpoint_label = staticmethod(checkpoint_label)
    baseline_label = staticmethod(baseline_label)

    # ---------------------------------------------------------------------------------------------------- runs

    def run(self, name: str) -> RunPlan:
        """Run `name` with its overrides merged (`PaperPlan.run`); `train.save_steps` gains the checkpoint steps the
        dynamics figures evaluate for this run."""
        plan = super().run(name)
        plan.train["save_steps"] = sorted({*plan.train["save_steps"], *self.checkpoint_steps(name)})
        return plan

    def run_settings(self, run: str) -> dict:
        """Settings of one training in the form `mtp_core.train.launch` takes for method `p1` (`settings.launch_check`;
        `train.finetune.rows_training_settings`, with `p1`: the method, and the mask seed)."""
        plan = self.run(run)
        return rows_training_settings(
            self.config, plan.model, plan.dataset, plan.train, p1=plan.method, mask_seed=self.s.mask_seed
        )

    def train_inputs(self, run: str) -> dict[str, list[str] | str]:
        plan = self.run(run)
        return rows_training_inputs(self.config, plan.model, plan.dataset)

    def export_dir(self, run: str, step: int | str) -> str:
        return f"{self.run_dir(run)}/exports/{step_dir_name(int(step))}"

    def checkpoint_steps(self, run: str) -> list[int]:
        """Steps whose exports of `run` are evaluated: `checkpoints.steps` if a dynamics figure shows it, else []."""
        shown = {getattr(self.s.figures, f).run for f in DYNAMICS_FIGURES}
        return sorted(set(self.s.checkpoints.steps)) if run in shown else []

    # ------------------------------------------------------------------------------------- decoding, evaluation

    def sweep(self, checkpoint: bool = False) -> dict[str, dict]:
        """Decoder label -> parameters (with `decoder`: the registry name) of the decoding sweep, in table order.
        `checkpoint=True`: the reduced sweep evaluated at training checkpoints (`checkpoints.static_k`, `.taus`)."""
        d, c = self.s.decoding, self.s.checkpoints
        ks, taus = d.static_k, d.conf_adapt.taus
        if checkpoint:
            ks = c.static_k if c.static_k is not None else ks
            taus = c.taus if c.taus is not None else taus
        out = {static_label(k): static_params(k) for k in sorted(ks)}
        return out | {conf_label(t): conf_params(t, d.conf_adapt.k_max) for t in sorted(taus, reverse=True)}

    def eval_settings(self, task: str) -> dict:
        """Evaluation settings of `task` in paper 1 (`EvalSettings` fields): the foundation's `evaluation` section,
        then `papers.p1.evaluation`, then `papers.p1.tasks.<task>` (keys present there override)."""
        found = self.config["evaluation"]
        out = {k: found[k] for k in EVAL_KEYS if k in found}
        for over in (self.s.evaluation, self.s.tasks.get(task, {})):
            out.update({k: v for k, v in over.items() if k in EVAL_KEYS})
        return out

    def task_metric(self, task: str) -> str | None:
        """The metric key (`<metric>,<filter>`) a table shows for `task` (None: `exact_match,flexible-extract` if
        the task has it, else its first metric)."""
        return self.s.tasks.get(task, {}).get("metric")

    def reused_baseline(self, model: str, task: str) -> dict[str, str]:
        """`{"foundation": its result}` when the foundation already ran the step-0 baseline's evaluation (base model
        `model`, greedy, same task, dtype and settings), which the baseline then relabels instead of decoding
        again; else {}."""
        e, dtype = self.config["evaluation"], self.s.evaluation["dtype"]
        same = (
            model == e["model"]
            and task in e["tasks"]
            and e["decoders"].get("greedy") == {}
            and dtype in (None, self.config["models"][model]["dtype"])
            and EvalSettings.from_config(self.config, **self.eval_settings(task))
            == EvalSettings.from_config(self.config)
        )
        return {"foundation": layout.decode_result("base", model, task, BASELINE_DECODER)} if same else {}

    # ------------------------------------------------------------------------------------ jobs, tables, figures

    def jobs(self, name: str) -> list[EvalJob]:
        """The evaluation jobs table or figure `name` reads: per run and task the step-0 baseline of its model and
        the final student (tables, Pareto figures); the final student and its exports (dynamics figures)."""
        if name == CONFIDENCE_FIGURE:
            return []
        spec = self.s.tables[name] if name in TABLES else getattr(self.s.figures, name)
        if name in DYNAMICS_FIGURES:
            steps = self.checkpoint_steps(spec.run)
            checkpoints = [EvalJob(checkpoint_label(spec.run, s), spec.task, "checkpoint") for s in steps]
            return [EvalJob(spec.run, spec.task, "final"), *checkpoints]
        tasks, jobs = spec.tasks if name in TABLES else [spec.task], []
        for run in spec.runs:
            baseline = baseline_label(self.run(run).model)
            jobs += [j for task in tasks for j in (EvalJob(baseline, task, "baseline"), EvalJob(run, task, "final"))]
        return list(dict.fromkeys(jobs))

    def all_jobs(self, kind: str | None = None) -> list[EvalJob]:
        """Every evaluation job (of `kind`) any table or figure reads (whether or not it is in `all`)."""
        jobs = dict.fromkeys(j for n in (*TABLES, *PARETO_FIGURES, *DYNAMICS_FIGURES) for j in self.jobs(n))
        return [j for j in jobs if kind in (None, j.kind)]

    def job_results(self, label: str, task: str, kind: str) -> list[str]:
        """The result files of one evaluation job (`EvalJob`'s fields; wildcards allowed)."""
        labels = [BASELINE_DECODER] if kind == "baseline" else self.sweep(checkpoint=kind == "checkpoint")
        return [self.result_path(label, task, lab) for lab in labels]

    def jobs_results(self, jobs: list[EvalJob]) -> list[str]:
        return list(dict.fromkeys(p for j in jobs for p in self.job_results(j.label, j.task, j.kind)))

    def experiment_results(self, name: str) -> list[str]:
        """The result files table or figure `name` reads."""
        return self.jobs_results(self.jobs(name))

    def run_results(self, run: str) -> list[str]:
        """Every result file of run `run` that some table or figure reads (its named target `p1_<run>`)."""
        return self.jobs_results([j for j in self.all_jobs() if j.run == run and j.kind != "baseline"])

    def titles(self, runs: list[str]) -> dict[str, str]:
        return {r: self.run(r).title for r in runs}

    def table_params(self, table: str) -> dict[str, Any]:
        """What the table script reads: runs, tasks, each task's metric and each run's title."""
        spec = self.s.tables[table]
        metrics, titles = {t: self.task_metric(t) for t in spec.tasks}, self.titles(spec.runs)
        return {"runs": list(spec.runs), "tasks": list(spec.tasks), "metrics": metrics, "titles": titles}

    def figure_params(self, figure: str) -> dict[str, Any]:
        """What the Pareto and dynamics figure scripts read: the task, its metric, the runs (a dynamics figure's
        one run and its final step) and their titles."""
        spec = getattr(self.s.figures, figure)
        runs = list(spec.runs) if figure in PARETO_FIGURES else [spec.run]
        out = {"task": spec.task, "metric": self.task_metric(spec.task), "titles": self.titles(runs)}
        if figure in DYNAMICS_FIGURES:
            return out | {"run": spec.run, "final_step": self.run(spec.run).max_steps}
        return out | {"runs": runs}

    def report_inputs(self, name: str) -> dict[str, str | list[str]]:
        """Figure 6: the confidence analysis of its run; the others: the result files they read."""
        if name == "fig6":
            return {"csv": self.confidence_csv(self.s.figures.fig6.run)}
        return {"results": self.experiment_results(name)}

    def report_params(self, name: str) -> dict[str, Any]:
        """A table's `table_params`; a figure's kind (pareto, dynamics or confidence) with its settings."""
        if name in TABLES:
            return self.table_params(name)
        if name == "fig6":
            return {"kind": "confidence", **self.confidence()}
        return {"kind": "pareto" if name in PARETO_FIGURES else "dynamics", **self.figure_params(name)}

    def run_names(self) -> list[str]:
        return list(self.s.runs)

    def confidence(self) -> dict[str, Any]:
        """Figure 6's settings (`figures.fig6`), as the confidence job and the figure read them."""
        return asdict(self.s.figures.fig6)

    def confidence_csv(self, run: str) -> str:
        return f"{self.analysis_dir(run)}/confidence.csv"

    def leaderboard(self) -> list[LeaderboardEntry]:
        """Paper 1's leaderboard rows (`papers.p1.leaderboard`): the final student of `run` with Static k for each of
        `static_k` and ConfAdapt for each of `taus` (k_max of the decoding sweep), on its trained checkpoint."""
        lb = self.s.leaderboard
        if not lb.run:
            return []
        plan, checkpoint, k_max = self.run(lb.run), self.final_model(lb.run), self.s.decoding.conf_adapt.k_max
        rows = [(static_label(k), f"Static k={k}", static_params(k)) for k in lb.static_k]
        rows += [(conf_label(t), f"ConfAdapt τ={t:g}", conf_params(t, k_max)) for t in lb.taus]
        return [
            LeaderboardEntry("p1", f"p1-{lb.run}-{label}", f"P1 {plan.title}, {title}", params, checkpoint, plan.model)
            for label, title, params in rows
        ]

    # -------------------------------------------------------------------------------------------------- checks

    def check(self) -> None:
        """Models, datasets (math or conversation kinds) and tasks are declared; run names are distinct from model
        names; every run's merged `method` and `train` build a `P1Config` / `TrainConfig`; tables and figures name
        declared runs; checkpoint steps lie within the runs' training and their sweep is a subset of the full
        sweep; the Figure 6 run trains on a math dataset (it reads the validation split)."""
        from ...evaluate.tasks import is_local_task, task_dataset
        from ...train.launch.settings import check_training
        from .settings import P1Config

        models, datasets, runs = self.config["models"], self.config["datasets"], list(self.s.runs)
        for run in runs:
            where = f"{self.key}.runs.{run}"
            if run in models:
                raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
            plan = self.run(run)
            self.check_names(f"runs.{run}.model", plan.model, list(models), "model", "`models`")
            self.check_names(f"runs.{run}.dataset", plan.dataset, list(datasets), "dataset", "`datasets`")
            if datasets[plan.dataset]["kind"] not in TRAIN_DATA_KINDS:
                raise ConfigError(
                    f"{where}.dataset: {plan.dataset!r} is of kind {datasets[plan.dataset]['kind']!r}; "
                    f"paper 1 trains on {', '.join(TRAIN_DATA_KINDS)}"
                )
            try:
                P1Config.from_dict(plan.method)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"{where}.method (merged with papers.p1.method): {e}") from None
            check_training(where, plan.train, self.launcher_settings(run))  # merged with papers.p1.train / launcher
            bad = [x for x in plan.train["save_steps"] if x > plan.max_steps]
            if bad:
                raise ConfigError(f"{where}: checkpoint/save steps {bad} exceed train.max_steps {plan.max_steps}")

        def need_task(key: str, task: str) -> None:
            if is_local_task(task):
                try:
                    task_dataset(self.config, task)
                except ValueError as e:
                    raise ConfigError(f"{self.key}.{key}: {e}") from None

        declared = (runs, "run", f"{self.key}.runs")
        for name, spec in self.s.tables.items():
            self.check_names(f"tables.{name}.runs", spec.runs, *declared)
            for i, task in enumerate(spec.tasks):
                need_task(f"tables.{name}.tasks[{i}]", task)
        for name in FIGURES:
            spec, key = getattr(self.s.figures, name), "runs" if name in PARETO_FIGURES else "run"
            self.check_names(f"figures.{name}.{key}", getattr(spec, key), *declared)
            if name != CONFIDENCE_FIGURE:
                need_task(f"figures.{name}.task", spec.task)
        fig6 = self.run(self.s.figures.fig6.run)
        if datasets[fig6.dataset]["kind"] not in MATH_KINDS:
            raise ConfigError(
                f"{self.key}.figures.fig6.run: run {fig6.name!r} trains on {fig6.dataset!r}, which has no "
                "validation split (Figure 6 needs a math dataset)"
            )
        full, reduced = self.sweep(), self.sweep(checkpoint=True)
        extra = [lab for lab in reduced if lab not in full]
        if extra:
            raise ConfigError(
                f"{self.key}.checkpoints: {', '.join(extra)} are not in the decoding sweep "
                "(papers.p1.decoding); the final point of a dynamics curve comes from that sweep"
            )
        if self.s.leaderboard.run:
            self.check_names("leaderboard.run", self.s.leaderboard.run, *declared)
