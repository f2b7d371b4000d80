"""Paper 1's experiment plan: the validated `papers.p1` config section turned into training runs, decoder
sweeps, evaluation jobs, tables and figures. One place, used by the workflow (`workflow/rules/common.smk`,
paper-1 block), the scripts and the tests, so that the rules stay declarative.

Names (all derived here, nowhere else):

* **Runs.** `papers.p1.runs.<name>` overrides the shared `model`, `dataset`, `method` (`P1Config` keys) and
  `train` (`TrainConfig` keys), merged key by key (`config.plan`). `main` is the paper's main recipe; the ablations
  of Tables 3-5 are further runs.
* **Run labels** of evaluations: `<run>` is the final model (`results/models/p1/<run>/model`), `<run>@step<N>`
  the export at step N (`exports/step-0000000N`, training dynamics, Figs 7-8 and 10-11), and
  `<model>@step0` the base model itself (the tables' "Baseline Step 0, k=1" row, greedy decoding).
  Run names may not contain `@` and may not equal a model name, so the three never collide.
* **Decoder labels** (one result file each): `static-k<k>` (`{decoder: static-k, k}`) and
  `conf-adapt-tau<tau>` (`{decoder: conf-adapt, tau, k_max}`), in the tables' row order: Static k ascending,
  then ConfAdapt with tau descending.
* **Result files**: `results/decode/p1/<run label>/<task>/<decoder label>.json` (+ `.samples.jsonl`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...config.layout import figure_files, table_files
from ...config.plan import FILE_NAME, RunPlan, merged_run, paper_section
from ...config.plan import launcher_settings as run_launcher
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError, dataset_on_bad_row, model_spec
from ...data.rows import MATH_KINDS, TRAIN_DATA_KINDS, train_data_path
from ...models.plan import model_dir
from ...train.finetune import with_base_stamp

RESULTS = "results"
STEP_SEP = "@step"
TABLES = ("table1", "table2", "table3", "table4", "table5")
PARETO_FIGURES = ("fig5", "fig9")
DYNAMICS_FIGURES = ("fig7", "fig8", "fig10", "fig11")
CONFIDENCE_FIGURE = "fig6"
FIGURES = ("fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11")
BASELINE_DECODER = "greedy"


def section(config: dict) -> dict:
    """`papers.p1` (an `enabled: false` stub when absent)."""
    return paper_section(config, "p1")


# ------------------------------------------------------------------------------------------------------ runs


def run_names(config: dict) -> list[str]:
    return list(section(config).get("runs") or {})


def run_plan(config: dict, run: str) -> RunPlan:
    """The merged settings of run `run` (`config.plan.merged_run`). `train.save_steps` gains the checkpoint steps the
    dynamics figures evaluate for this run."""
    plan = merged_run(config, "p1", run)
    plan.train["save_steps"] = sorted(set(plan.train.get("save_steps") or []) | set(checkpoint_steps(config, run)))
    return plan


def run_dir(run: str) -> str:
    return f"{RESULTS}/models/p1/{run}"


def run_settings(config: dict, run: str) -> dict:
    """Settings of one training in the form `mtp_core.train.launch` takes for method `p1` (`settings.launch_check`): the
    model spec, its checkpoint dir (gguf/tiny/finetuned) or None, the train rows, `train`, `p1` (the method), and
    `base_stamp` for a fine-tuned model (`train.finetune.with_base_stamp`)."""
    plan = run_plan(config, run)
    spec = model_spec(config, plan.model)
    return with_base_stamp(
        {
            "model": spec,
            "base_dir": model_dir(config, plan.model),
            "data": train_data_path(plan.dataset),
            "train": plan.train,
            "p1": plan.method,
            "mask_seed": int(section(config).get("mask_seed", 0)),
            "on_bad_row": dataset_on_bad_row(config, plan.dataset),
        },
        config,
        plan.model,
    )


def from_config(config: dict, run: str) -> tuple[dict, dict]:
    """The launcher's resolver of method `p1` (`--config C --run R`): the run's settings and launcher settings."""
    return run_settings(config, run), launcher_settings(config, run)


def launcher_settings(config: dict, run: str) -> dict:
    """`config.plan.launcher_settings` of run `run`."""
    return run_launcher(config, "p1", run)


# --------------------------------------------------------------------------------------------- run labels


def checkpoint_label(run: str, step: int) -> str:
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


# ---------------------------------------------------------------------------------------------- decoders


def static_label(k: int) -> str:
    return f"static-k{int(k)}"


def conf_label(tau: float) -> str:
    return f"conf-adapt-tau{float(tau):g}"


def sweep(config: dict, checkpoint: bool = False) -> dict[str, dict]:
    """Decoder label -> parameters (with `decoder`: the registry name) of the decoding sweep, in table order.
    `checkpoint=True`: the reduced sweep evaluated at training checkpoints (`checkpoints.static_k`, `.taus`)."""
    d = section(config)["decoding"]
    ks, taus = d["static_k"], d["conf_adapt"]["taus"]
    if checkpoint:
        c = section(config).get("checkpoints") or {}
        ks = c.get("static_k") if c.get("static_k") is not None else ks
        taus = c.get("taus") if c.get("taus") is not None else taus
    out = {static_label(k): {"decoder": "static-k", "k": int(k)} for k in sorted(ks)}
    for t in sorted(taus, reverse=True):
        out[conf_label(t)] = {"decoder": "conf-adapt", "tau": float(t), "k_max": int(d["conf_adapt"]["k_max"])}
    return out


# ------------------------------------------------------------------------------------------ evaluation


EVAL_KEYS = ("limit", "batch_size", "max_gen_toks", "apply_chat_template", "num_fewshot", "bootstrap_iters")


def eval_settings(config: dict, task: str) -> dict:
    """Evaluation settings of `task` in paper 1 (`EvalSettings` fields): the foundation's `evaluation` section,
    then `papers.p1.evaluation`, then `papers.p1.tasks.<task>` (keys present there override)."""
    s = section(config)
    out = {k: config["evaluation"].get(k) for k in EVAL_KEYS if k in config["evaluation"]}
    for over in (s.get("evaluation") or {}, (s.get("tasks") or {}).get(task) or {}):
        out.update({k: v for k, v in over.items() if k in EVAL_KEYS})
    return out


def eval_dtype(config: dict) -> str | None:
    """The dtype paper 1's evaluations load models in (`papers.p1.evaluation.dtype`; None: the model's own)."""
    return (section(config).get("evaluation") or {}).get("dtype")


def task_metric(config: dict, task: str) -> str | None:
    """The metric key (`<metric>,<filter>`) a table shows for `task` (None: `exact_match,flexible-extract` if
    the task has it, else its first metric)."""
    return ((section(config).get("tasks") or {}).get(task) or {}).get("metric")


def table_spec(config: dict, name: str) -> dict:
    return section(config)["tables"][name]


def figure_spec(config: dict, name: str) -> dict:
    return section(config)["figures"][name]


def targets_in_all(config: dict) -> list[str]:
    s = section(config)
    return list(s.get("in_all") if s.get("in_all") is not None else (*TABLES, *FIGURES))


def target_files(name: str) -> list[str]:
    """The files of table or figure `name` (CSV + markdown; PNG + PDF)."""
    return table_files("p1", name) if name in TABLES else figure_files("p1", name)


def leaderboard_entries(config: dict) -> list[LeaderboardEntry]:
    """Paper 1's leaderboard rows (`papers.p1.leaderboard`): the final student of `run` with Static k for each of
    `static_k` and ConfAdapt for each of `taus` (k_max of the decoding sweep), on its trained checkpoint."""
    spec = section(config).get("leaderboard") or {}
    if not spec.get("run"):
        return []
    run = spec["run"]
    checkpoint, model = f"{run_dir(run)}/model", run_plan(config, run).model
    title = run_plan(config, run).title
    k_max = int(section(config)["decoding"]["conf_adapt"]["k_max"])
    rows = [
        LeaderboardEntry(
            "p1",
            f"p1-{run}-{static_label(k)}",
            f"P1 {title}, Static k={k}",
            {"decoder": "static-k", "k": int(k)},
            checkpoint,
            model,
        )
        for k in spec.get("static_k", [])
    ]
    rows += [
        LeaderboardEntry(
            "p1",
            f"p1-{run}-{conf_label(t)}",
            f"P1 {title}, ConfAdapt τ={t:g}",
            {"decoder": "conf-adapt", "tau": float(t), "k_max": k_max},
            checkpoint,
            model,
        )
        for t in spec.get("taus", [])
    ]
    return rows


def all_targets(config: dict) -> list[str]:
    """Paper 1's share of `rule all`: the files of the tables and figures of `papers.p1.in_all`."""
    return [f for name in targets_in_all(config) for f in target_files(name)]


def checkpoint_steps(config: dict, run: str | None = None) -> list[int]:
    """Steps whose exports are evaluated (dynamics figures); for `run`: [] unless a dynamics figure shows it."""
    s = section(config)
    steps = sorted({int(x) for x in (s.get("checkpoints") or {}).get("steps") or []})
    if run is None:
        return steps
    shown = {(s.get("figures") or {}).get(f, {}).get("run") for f in DYNAMICS_FIGURES}
    return steps if run in shown else []


@dataclass(frozen=True)
class EvalJob:
    """One evaluation job: a run label (final, checkpoint or baseline) on one task, with its decoder sweep."""

    label: str
    task: str
    kind: str  # "final" | "checkpoint" | "baseline"

    @property
    def run(self) -> str:
        return parse_label(self.label)[0]


def _model_of(config: dict, run: str) -> str:
    return run_plan(config, run).model


def table_jobs(config: dict, name: str) -> list[EvalJob]:
    spec = table_spec(config, name)
    jobs = []
    for run in spec["runs"]:
        for task in spec["tasks"]:
            jobs += [EvalJob(baseline_label(_model_of(config, run)), task, "baseline"), EvalJob(run, task, "final")]
    return _unique(jobs)


def figure_jobs(config: dict, name: str) -> list[EvalJob]:
    spec = figure_spec(config, name)
    if name in PARETO_FIGURES:
        jobs = []
        for run in spec["runs"]:
            jobs += [
                EvalJob(baseline_label(_model_of(config, run)), spec["task"], "baseline"),
                EvalJob(run, spec["task"], "final"),
            ]
        return _unique(jobs)
    if name in DYNAMICS_FIGURES:
        run, task = spec["run"], spec["task"]
        return [EvalJob(run, task, "final")] + [
            EvalJob(checkpoint_label(run, s), task, "checkpoint") for s in checkpoint_steps(config, run)
        ]
    return []


def all_jobs(config: dict) -> list[EvalJob]:
    """Every evaluation job any table or figure of paper 1 reads (whether or not it is in `all`)."""
    jobs: list[EvalJob] = []
    for t in TABLES:
        jobs += table_jobs(config, t)
    for f in (*PARETO_FIGURES, *DYNAMICS_FIGURES):
        jobs += figure_jobs(config, f)
    return _unique(jobs)


def job_results(config: dict, job: EvalJob) -> list[str]:
    """The result files of one job."""
    labels = [BASELINE_DECODER] if job.kind == "baseline" else list(sweep(config, checkpoint=job.kind == "checkpoint"))
    return [result_path(job.label, job.task, lab) for lab in labels]


def result_path(label: str, task: str, decoder_label: str) -> str:
    return f"{RESULTS}/decode/p1/{label}/{task}/{decoder_label}.json"


def jobs_results(config: dict, jobs: list[EvalJob]) -> list[str]:
    out: list[str] = []
    for j in jobs:
        out += job_results(config, j)
    return list(dict.fromkeys(out))


def runs_of_targets(config: dict, names: list[str]) -> list[str]:
    """Training runs the named tables/figures need."""
    runs: list[str] = []
    for n in names:
        jobs = table_jobs(config, n) if n in TABLES else figure_jobs(config, n)
        runs += [j.run for j in jobs if j.kind != "baseline"]
        if n == CONFIDENCE_FIGURE:
            runs.append(figure_spec(config, n)["run"])
    return list(dict.fromkeys(runs))


def _unique(jobs: list[EvalJob]) -> list[EvalJob]:
    return list(dict.fromkeys(jobs))


# -------------------------------------------------------------------------------------------------- checks


def check(config: dict) -> None:
    """Cross-references and settings JSON schema cannot express; raises ConfigError naming the key.

    Models, datasets (math or conversation kinds) and tasks are declared; run names are safe and distinct from
    model names; every run's merged `method` and `train` build a `P1Config` / `TrainConfig`; tables and
    figures name declared runs; checkpoint steps lie within the runs' training and their sweep is a subset of
    the full sweep; the Figure 6 run trains on a math dataset (it reads the validation split)."""
    from ...evaluate.tasks import is_local_task, task_dataset
    from ...train.launch.settings import check_training
    from .settings import P1Config

    s = section(config)
    models, datasets = config["models"], config["datasets"]
    runs = s.get("runs") or {}
    if not runs:
        raise ConfigError("papers.p1.runs: at least one run is needed")
    for run in runs:
        where = f"papers.p1.runs.{run}"
        if not FILE_NAME.match(run) or STEP_SEP in run:
            raise ConfigError(f"{where}: run names use letters, digits, '_', '.', '-' only")
        if run in models:
            raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
        plan = run_plan(config, run)
        if plan.model is None or plan.model not in models:
            raise ConfigError(
                f"{where}.model: model {plan.model!r} is not declared (declared: {', '.join(sorted(models))})"
            )
        if plan.dataset is None or plan.dataset not in datasets:
            raise ConfigError(
                f"{where}.dataset: dataset {plan.dataset!r} is not declared (declared: {', '.join(sorted(datasets))})"
            )
        if datasets[plan.dataset]["kind"] not in TRAIN_DATA_KINDS:
            raise ConfigError(
                f"{where}.dataset: {plan.dataset!r} is of kind {datasets[plan.dataset]['kind']!r}; "
                f"paper 1 trains on {', '.join(TRAIN_DATA_KINDS)}"
            )
        try:
            P1Config.from_dict(plan.method)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}.method (merged with papers.p1.method): {e}") from None
        check_training(where, plan.train, launcher_settings(config, run))  # merged with papers.p1.train / launcher
        bad = [x for x in plan.train["save_steps"] if x > plan.max_steps]
        if bad:
            raise ConfigError(f"{where}: checkpoint/save steps {bad} exceed train.max_steps {plan.max_steps}")

    def need_run(run: str, key: str) -> None:
        if run not in runs:
            raise ConfigError(f"{key}: run {run!r} is not declared in papers.p1.runs (runs: {', '.join(runs)})")

    def need_task(task: str, key: str) -> None:
        if is_local_task(task):
            try:
                task_dataset(config, task)
            except ValueError as e:
                raise ConfigError(f"{key}: {e}") from None

    for name in TABLES:
        spec = s["tables"][name]
        for i, run in enumerate(spec["runs"]):
            need_run(run, f"papers.p1.tables.{name}.runs[{i}]")
        for i, task in enumerate(spec["tasks"]):
            need_task(task, f"papers.p1.tables.{name}.tasks[{i}]")
    for name in FIGURES:
        spec = s["figures"][name]
        for i, run in enumerate(spec.get("runs") or []):
            need_run(run, f"papers.p1.figures.{name}.runs[{i}]")
        if "run" in spec:
            need_run(spec["run"], f"papers.p1.figures.{name}.run")
        if "task" in spec:
            need_task(spec["task"], f"papers.p1.figures.{name}.task")
    fig6 = run_plan(config, s["figures"][CONFIDENCE_FIGURE]["run"])
    if datasets[fig6.dataset]["kind"] not in MATH_KINDS:
        raise ConfigError(
            f"papers.p1.figures.fig6.run: run {fig6.name!r} trains on {fig6.dataset!r}, which has no "
            "validation split (Figure 6 needs a math dataset)"
        )
    full, reduced = sweep(config), sweep(config, checkpoint=True)
    extra = [lab for lab in reduced if lab not in full]
    if extra:
        raise ConfigError(
            f"papers.p1.checkpoints: {', '.join(extra)} are not in the decoding sweep "
            "(papers.p1.decoding); the final point of a dynamics curve comes from that sweep"
        )
    if (s.get("leaderboard") or {}).get("run"):
        need_run(s["leaderboard"]["run"], "papers.p1.leaderboard.run")
