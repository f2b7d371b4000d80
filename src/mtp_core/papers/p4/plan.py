"""Paper 4's experiment plan: the validated `papers.p4` config section turned into trainings, evaluation and speed
jobs, result files, tables and figures (paper 4, §3). `P4Plan`, over the core's `PaperPlan`, reads `papers.p4` into
typed settings (`P4Settings`); the rules (`workflow/rules/p4.smk`), checks and tests read it.

Names (derived here, nowhere else):

* **Runs.** `papers.p4.runs.<name>` overrides the shared `model`, `dataset`, `method` (`settings.DMTDConfig` keys) and
  `train` (`TrainConfig`), merged key by key (`config.plan`). `main` is the paper's E0D8 MTD3; Table 1's MTD2/4/6
  and Table 2's ExDy are further runs.
* **Labels** of what is evaluated: `<run>` (the trained model, `results/models/p4/<run>/model`), `<run>@step0`
  (the run's split on its untrained start weights: Table 5's "untrained" row) and `<model>@step0` (the start
  model itself: "Vanilla"). Run names may not contain `@` nor equal a model name.
* **Settings** (one result file each): `vanilla` (teacher-forced plain model) and `greedy` (its generation) for a
  vanilla label; `dmtd-tau<τ>` for the others, τ being the inference cycle length (Table 5's k -> z: a τ = 3
  model decoded at z).
* **Evaluation jobs**: one per label (the model loads once): the teacher-forced scores on the held-out split
  (`teacher_forced`: `results/decode/p4/<label>/tf-<dataset>/<setting>.json`) and every lm-eval task of `tasks`
  (`results/decode/p4/<label>/<task>/<setting>.json`), at every τ some table (or the leaderboard's choice) needs.
* **Speed job** (Table 3, Fig. 4): the run of `speed.run` on random prompts, greedy and `dmtd` at each of
  `speed.taus` side by side per batch size (bench protocol): `results/decode/p4/<run>/speed-b<B>/<setting>.json`,
  with the measured layer costs and the modeled speed-up in `results/analysis/p4/<run>/layer_costs.json`.
* **τ choice** (the leaderboard's second row): `results/analysis/p4/<run>/selected_tau.json`, from the
  teacher-forced retention on the held-out split and the speed job (never the leaderboard's test prompts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...config import layout
from ...config.plan import RunPlan
from ...config.registry import LeaderboardEntry
from ...config.settings import dataset_on_bad_row
from ...evaluate.tasks import task_dataset, task_inputs
from ...models.plan import model_inputs
from ...train.finetune import rows_training_inputs, rows_training_settings
from .checks import Checks
from .settings import QUALITY_TABLES, STEP_SEP, P4Settings

SPEED_TABLE = "table3"
TABLES = ("table1", "table2", "table3", "table4", "table5")
FIGURES = ("fig4", "fig5")
VANILLA_TF, VANILLA_GEN = "vanilla", "greedy"
TF_COLUMN = "tf_acc"  # the teacher-forced accuracy as a quality column (`overall`)
EVAL_KEYS = ("limit", "batch_size", "max_gen_toks", "apply_chat_template", "num_fewshot", "bootstrap_iters",
             "chat_template_kwargs")  # fmt: skip


@dataclass(frozen=True)
class P4Run(RunPlan):
    """One DMTD training run (`method`: DMTDConfig keys, defaults filled by the schema)."""

    @property
    def cycle(self) -> int:
        return int(self.method["cycle"])

    @property
    def split(self) -> tuple[int, int]:
        return int(self.method["encoding_layers"]), int(self.method["decoding_layers"])


def setting_label(tau: int | str) -> str:
    return f"dmtd-tau{tau}"


def speed_task(batch_size: int) -> str:
    return f"speed-b{int(batch_size)}"


def vanilla_label(model: str) -> str:
    return f"{model}{STEP_SEP}0"


def untrained_label(run: str) -> str:
    return f"{run}{STEP_SEP}0"


class P4Plan(Checks):
    paper = "p4"
    Settings = P4Settings
    TABLES = TABLES
    FIGURES = FIGURES
    OWN_RULES = ("fig5",)  # its rule writes the fit beside the figure
    TRAIN_METHOD = "p4"

    # -------------------------------------------------------------------------------------------- runs

    def run_plan(self, run: str) -> P4Run:
        return self.run(run, P4Run)

    def run_settings(self, run: str) -> dict:
        """Settings of method `p4` (`settings.launch_check`; `train.finetune.rows_training_settings`, with `p4`: the
        method)."""
        plan = self.run_plan(run)
        return rows_training_settings(self.config, plan.model, plan.dataset, plan.train, p4=plan.method)

    def train_inputs(self, run: str) -> dict[str, list[str] | str]:
        plan = self.run_plan(run)
        return rows_training_inputs(self.config, plan.model, plan.dataset)

    # ------------------------------------------------------------------------------------------ labels

    def parse_label(self, label: str) -> tuple[str, str]:
        """(kind, name): ("vanilla", model), ("untrained", run) or ("trained", run)."""
        name, sep, step = label.partition(STEP_SEP)
        if sep and step == "0":
            return ("untrained", name) if name in self.s.runs else ("vanilla", name)
        return "trained", label

    def label_model(self, label: str) -> str:
        """The declared model whose tokenizer and template the label's weights use."""
        kind, name = self.parse_label(label)
        return name if kind == "vanilla" else self.run_plan(name).model

    def checkpoint(self, label: str) -> str | None:
        """The trained checkpoint a label evaluates (None: the start model's own weights)."""
        kind, name = self.parse_label(label)
        return self.final_model(name) if kind == "trained" else None

    def setting_params(self, label: str, tau: int) -> dict:
        """Decoder parameters of a `dmtd` setting: τ, and the split for an untrained label (its model has no
        `config.dmtd`)."""
        kind, name = self.parse_label(label)
        params: dict = {"decoder": "dmtd", "tau": int(tau)}
        if kind == "untrained":
            run = self.run_plan(name)
            e, d = run.split
            params |= {"encoding_layers": e, "decoding_layers": d, "combine": run.method["combine"]}
        return params

    # ---------------------------------------------------------------------------------- quality tables

    def table_runs(self, name: str) -> list[str]:
        """Runs shown by a quality table, in row order (Table 2: its groups' runs in order)."""
        spec = getattr(self.s.tables, name)
        if name == "table2":
            return [r for runs in spec.groups.values() for r in runs]
        return [spec.run] if name == "table5" else list(spec.runs)

    def quality_rows(self, name: str) -> list[tuple[str, int]]:
        """(label, τ) of every row of a quality table, vanilla rows as (label, 0)."""
        rows: list[tuple[str, int]] = []
        for run in self.table_runs(name):
            plan = self.run_plan(run)
            rows.append((vanilla_label(plan.model), 0))
            if name == "table5":
                spec = self.s.tables.table5
                rows += [(run, int(t)) for t in spec.taus]
                if spec.untrained:
                    rows.append((untrained_label(run), plan.cycle))
            else:
                rows.append((run, plan.cycle))
        return list(dict.fromkeys(rows))

    def tasks(self) -> list[str]:
        return list(self.s.tasks)

    def columns(self) -> list[str]:
        """The quality columns: the teacher-forced accuracy, then every task."""
        return [TF_COLUMN, *self.tasks()]

    def eval_settings(self, task: str) -> dict:
        """`EvalSettings` overrides of `task`: `papers.p4.evaluation`, then `papers.p4.tasks.<task>`."""
        out: dict = {}
        for over in (self.s.evaluation, self.s.tasks.get(task) or {}):
            out.update({k: v for k, v in over.items() if k in EVAL_KEYS})
        return out

    def overall_columns(self) -> list[str]:
        """The columns averaged into "Overall" (mean over columns of score / vanilla score, §3.2)."""
        return list(self.s.overall) if self.s.overall is not None else self.columns()

    # -------------------------------------------------------------------------------- evaluation jobs

    def tf_dataset(self) -> str:
        return self.s.teacher_forced.dataset or self.s.dataset

    def tf_task(self) -> str:
        return f"tf-{self.tf_dataset()}"

    def label_taus(self) -> dict[str, list[int]]:
        """Every evaluated label (vanilla labels first) -> the τ its evaluation job runs (ascending; [] for
        vanilla): the union over the quality tables, and the leaderboard run at the speed job's τ (its choice
        reads them)."""
        want: dict[str, set[int]] = {}
        for name in QUALITY_TABLES:
            for label, tau in self.quality_rows(name):
                want.setdefault(label, set())
                if tau:
                    want[label].add(tau)
        run = self.s.leaderboard.run
        if run:
            plan = self.run_plan(run)
            want.setdefault(vanilla_label(plan.model), set())
            want.setdefault(run, set()).update({plan.cycle, *self.s.speed.taus})
        order = sorted(want, key=lambda lab: (self.parse_label(lab)[0] != "vanilla", lab))
        return {lab: sorted(want[lab]) for lab in order}

    def job_settings(self, label: str) -> dict[str, dict]:
        """Setting -> decoder params of one evaluation job (vanilla: greedy; else `dmtd` at each τ)."""
        if self.parse_label(label)[0] == "vanilla":
            return {VANILLA_GEN: {"decoder": "greedy"}}
        return {setting_label(t): self.setting_params(label, t) for t in self.label_taus()[label]}

    def job_results(self, label: str) -> list[str]:
        """The result files of one evaluation job: teacher-forced settings, then each task's."""
        vanilla = self.parse_label(label)[0] == "vanilla"
        tf = [VANILLA_TF] if vanilla else [setting_label(t) for t in self.label_taus()[label]]
        out = [self.result_path(label, self.tf_task(), s) for s in tf]
        return out + [self.result_path(label, t, s) for t in self.tasks() for s in self.job_settings(label)]

    def eval_outputs(self, label: str, tau: str | None) -> list[str]:
        """The files of one evaluation job (`tau` a wildcard or None: the vanilla job): its teacher-forced
        result, then each task's."""
        tf = VANILLA_TF if tau is None else setting_label(tau)
        gen = VANILLA_GEN if tau is None else tf
        return [self.result_path(label, self.tf_task(), tf)] + [self.result_path(label, t, gen) for t in self.tasks()]

    def eval_inputs(self, label: str) -> dict:
        """The label's weights (trained checkpoint, or the start model's), the held-out split, the tasks' data."""
        checkpoint = self.checkpoint(label)
        inputs = {"weights": [checkpoint] if checkpoint else model_inputs(self.config, self.label_model(label))}
        inputs["validation"] = layout.data_split(self.tf_dataset(), "validation")
        for task in self.tasks():
            inputs.update(task_inputs(self.config, task, f"task_{task}"))
        return inputs

    def eval_params(self, label: str, tau: str | None) -> dict:
        """What the evaluation script needs: the setting, outputs, teacher-forced and task specs."""
        kind, run = self.parse_label(label)
        if kind == "vanilla":
            tf_setting, settings, template = VANILLA_TF, {VANILLA_GEN: {"decoder": "greedy"}}, "auto"
        else:
            tf_setting = setting_label(int(tau))
            settings = {tf_setting: self.setting_params(label, int(tau))}
            template = self.run_plan(run).method["template"]
        tf, dataset, task = self.s.teacher_forced, self.tf_dataset(), self.tf_task()
        return {
            "label": label,
            "model": self.label_model(label),
            "checkpoint": self.checkpoint(label),
            "settings": settings,
            "tf": {
                "task": task,
                "dataset": dataset,
                "data": layout.data_split(dataset, "validation"),
                "rows": tf.rows,
                "batch_size": tf.batch_size,
                "max_tokens": tf.max_tokens,
                "template": template,
                "on_bad_row": dataset_on_bad_row(self.config, dataset),
            },
            "tf_outputs": {tf_setting: self.result_path(label, task, tf_setting)},
            "tasks": {
                t: {
                    "data": layout.data_split(d, "test") if (d := task_dataset(self.config, t)) else None,
                    "outputs": {st: self.result_path(label, t, st) for st in settings},
                    "settings": self.eval_settings(t),
                }
                for t in self.tasks()
            },
        }

    def run_results(self, run: str) -> list[str]:
        """Every result of run `run` some table reads, and its training (the named target `p4_<run>`)."""
        labels = [lab for lab in self.label_taus() if self.parse_label(lab)[1] == run]
        return [self.train_record(run), *(f for lab in labels for f in self.job_results(lab))]

    # ------------------------------------------------------------------------------------------- speed

    def speed_settings(self) -> dict[str, dict]:
        """Setting -> decoder params of the speed job: greedy, then `dmtd` at each τ of `speed.taus`."""
        taus = sorted(self.s.speed.taus)
        return {VANILLA_GEN: {"decoder": "greedy"}} | {setting_label(t): {"decoder": "dmtd", "tau": t} for t in taus}

    def speed_outputs(self) -> dict[int, list[str]]:
        """Batch size -> the speed job's result files (greedy, then each τ); none without `speed.run`."""
        run = self.s.speed.run
        if run is None:
            return {}
        return {b: [self.result_path(run, speed_task(b), s) for s in self.speed_settings()] for b in
                self.s.speed.batch_sizes}  # fmt: skip

    def layer_costs(self) -> dict[int, str]:
        """Batch size -> the measured layer costs of the speed job."""
        run = self.s.speed.run
        return {b: f"{self.analysis_dir(run)}/layer_costs-b{b}.json" for b in self.s.speed.batch_sizes} if run else {}

    def speed_params(self) -> dict:
        if self.s.speed.run is None:
            return {}
        return {
            "run": self.s.speed.run,
            "spec": asdict(self.s.speed),
            "settings": self.speed_settings(),
            "outputs": self.speed_outputs(),
            "layer_costs": self.layer_costs(),
            "bench": self.bench_settings(),
        }

    def speed_files(self) -> list[str]:
        return [f for files in self.speed_outputs().values() for f in files] + list(self.layer_costs().values())

    def selected_tau_path(self, run: str) -> str:
        return f"{self.analysis_dir(run)}/selected_tau.json"

    def select_params(self) -> dict:
        """The τ choice's inputs: the leaderboard run's teacher-forced results at the speed job's τ, the vanilla
        one, and the speed results at the smallest batch size (the held-out split and random prompts only, never
        the test prompts)."""
        run = self.s.leaderboard.run
        taus, batch, task = sorted(self.s.speed.taus), min(self.s.speed.batch_sizes), self.tf_task()
        tf = {t: self.result_path(run, task, setting_label(t)) for t in taus}
        speed = {t: self.result_path(run, speed_task(batch), setting_label(t)) for t in taus}
        vanilla = self.result_path(vanilla_label(self.run_plan(run).model), task, VANILLA_TF)
        files = [vanilla, *tf.values(), *speed.values()]
        threshold = self.s.leaderboard.retention
        return {"vanilla": vanilla, "tf": tf, "speed": speed, "threshold": threshold, "files": files}

    # ------------------------------------------------------------------------------- tables, figures

    def row_title(self, name: str, label: str, tau: int) -> str:
        """A quality table's row title in the paper's style (Table 1 `MTD3`, Table 2 `E0D8`, Table 4 `Ours`,
        Table 5 `3→4`; `Vanilla`; Table 5's extra `untrained (τ=3)`)."""
        kind, run = self.parse_label(label)
        if kind == "vanilla":
            return "Vanilla"
        plan = self.run_plan(run)
        if kind == "untrained":
            return f"untrained E{plan.split[0]}D{plan.split[1]} (τ={tau})"
        titles = {"table1": f"MTD{tau}", "table2": f"E{plan.split[0]}D{plan.split[1]}", "table4": "Ours"}
        return titles.get(name, f"{plan.cycle}→{tau}")

    def column_files(self, label: str, tau: int) -> dict[str, str]:
        """Quality column -> result file of a label at τ (0: vanilla)."""
        tf = VANILLA_TF if tau == 0 else setting_label(tau)
        gen = VANILLA_GEN if tau == 0 else setting_label(tau)
        tasks = {t: self.result_path(label, t, gen) for t in self.tasks()}
        return {TF_COLUMN: self.result_path(label, self.tf_task(), tf), **tasks}

    def table_layout(self, name: str) -> list[dict]:
        """The rows of a quality table as its script takes them (JSON-ready): block (Table 2: the group; Table 4:
        the model), title, label, τ, the result file of each column, and the vanilla row's files (retention)."""
        groups = self.s.tables.table2.groups
        out = []
        for label, tau in self.quality_rows(name):
            kind, run = self.parse_label(label)
            model = self.label_model(label)
            block = {"table2": next((g for g, rs in groups.items() if kind != "vanilla" and run in rs), None),
                     "table4": model}.get(name)  # fmt: skip
            out.append(
                {
                    "block": block,
                    "title": self.row_title(name, label, tau),
                    "label": label,
                    "tau": tau,
                    "files": self.column_files(label, tau),
                    "vanilla": self.column_files(vanilla_label(model), 0),
                }
            )
        if name == "table2":  # one Vanilla row on top, then the groups in order
            van = [r for r in out if r["title"] == "Vanilla"][:1]
            order = {g: i for i, g in enumerate(groups)}
            out = van + sorted(
                [r for r in out if r["title"] != "Vanilla"], key=lambda r: order.get(r["block"], len(order))
            )
        return out

    def table_results(self, name: str) -> list[str]:
        """Result files a table reads (a quality row's teacher-forced and task results at its τ; the speed job's)."""
        if name == SPEED_TABLE:
            return self.speed_files()
        rows = self.table_layout(name)
        return list(dict.fromkeys(f for row in rows for f in (*row["files"].values(), *row["vanilla"].values())))

    def table_params(self, name: str) -> dict:
        if name == SPEED_TABLE:
            return {"kind": "speed", **self.speed_params()}
        titles = {t: (self.s.tasks[t].get("title") or t) for t in self.tasks()}
        return {
            "kind": "quality",
            "layout": self.table_layout(name),
            "columns": self.columns(),
            "overall": self.overall_columns(),
            "metrics": {**{t: self.s.tasks[t].get("metric") for t in self.tasks()}, TF_COLUMN: "tf_acc,none"},
            "titles": {TF_COLUMN: "TF acc (val)", **titles},
            "offsets": max(t for _, t in self.quality_rows(name)) if name == "table5" else 0,
        }

    def report_inputs(self, name: str) -> dict[str, list[str]]:
        """A table's result files (`table_results`); Figure 4's: the speed job's results and layer costs."""
        if name == "fig4":
            return {"results": [f for files in self.speed_outputs().values() for f in files],
                    "layer_costs": list(self.layer_costs().values())}  # fmt: skip
        return {"results": self.table_results(name)}

    def report_params(self, name: str) -> dict:
        """A table's `table_params`; Figure 4's: the speed job's (`speed_params`); Figure 5's: its curves."""
        if name == "fig4":
            return {"kind": "fig4", **self.speed_params()}
        return {"kind": "fig5", **self.fig5_params()} if name == "fig5" else self.table_params(name)

    def run_names(self) -> list[str]:
        return list(self.s.runs)

    def fig5_inputs(self) -> list[str]:
        return [self.train_record(r) for r in self.s.figures.fig5.runs]

    def fig5_params(self) -> dict:
        runs = self.s.figures.fig5.runs
        curves = {self.run_plan(r).title: [f"{self.run_dir(r)}/{f}" for f in ("curves.csv", "train_summary.json")]
                  for r in runs}  # fmt: skip
        return {"curves": curves, "bins": self.s.figures.fig5.bins}

    def fig5_fit_path(self) -> str:
        return self.analysis_dir("fig5_fit.json")

    # --------------------------------------------------------------------------------- leaderboard, checks

    def leaderboard(self) -> list[LeaderboardEntry]:
        """The run's model with `dmtd` at its training τ, and (`selected: true`) at the τ with the best speed
        among those whose teacher-forced retention on the held-out split is at least `retention`
        (`selected_tau.json`, merged into the row's parameters when its job runs)."""
        spec = self.s.leaderboard
        if not spec.run:
            return []
        plan, checkpoint = self.run_plan(spec.run), self.final_model(spec.run)
        rows = [LeaderboardEntry("p4", f"p4-{spec.run}-{setting_label(plan.cycle)}",
                                 f"P4 DMTD {plan.title}, τ={plan.cycle} (trained)",
                                 {"decoder": "dmtd", "tau": plan.cycle}, checkpoint, plan.model)]  # fmt: skip
        if spec.selected:
            title = f"P4 DMTD {plan.title}, τ chosen on validation (≥ {spec.retention:.0%} retention)"
            rows.append(LeaderboardEntry("p4", f"p4-{spec.run}-dmtd-selected", title, {"decoder": "dmtd"}, checkpoint,
                                         plan.model, params_from=self.selected_tau_path(spec.run)))  # fmt: skip
        return rows
