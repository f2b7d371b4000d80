"""Paper 4's experiment plan: the validated `papers.p4` config section turned into trainings, evaluation and speed
jobs, result files, tables and figures (paper 4, §3). One place, used by the workflow (`workflow/rules/p4*.smk`),
the scripts and the tests.

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

from dataclasses import dataclass

from ...config.layout import figure_files, table_files
from ...config.plan import RunPlan as CoreRunPlan
from ...config.plan import launcher_settings as run_launcher
from ...config.plan import merged_run, paper_section
from ...config.registry import LeaderboardEntry
from ...config.settings import dataset_on_bad_row, model_spec
from ...data.rows import train_data_path
from ...models.plan import model_dir
from ...train.finetune import with_base_stamp

RESULTS = "results"
STEP_SEP = "@step"
QUALITY_TABLES = ("table1", "table2", "table4", "table5")
SPEED_TABLE = "table3"
TABLES = ("table1", "table2", "table3", "table4", "table5")
FIGURES = ("fig4", "fig5")
VANILLA_TF, VANILLA_GEN = "vanilla", "greedy"
TF_COLUMN = "tf_acc"  # the teacher-forced accuracy as a quality column (`overall`)
RESERVED = ("train", "evaluate", "vanilla", "speed", "table", "figure4", "figure5", "select_tau")  # rules `p4_<x>`


def section(config: dict) -> dict:
    """`papers.p4` (an `enabled: false` stub when absent)."""
    return paper_section(config, "p4")


# ------------------------------------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunPlan(CoreRunPlan):
    """One DMTD training run (`config.plan.RunPlan`; `method`: DMTDConfig keys)."""

    @property
    def cycle(self) -> int:
        return int(self.method.get("cycle", 3))

    @property
    def split(self) -> tuple[int, int]:
        return int(self.method.get("encoding_layers", 0)), int(self.method.get("decoding_layers", 8))


def run_names(config: dict) -> list[str]:
    return list(section(config).get("runs") or {})


def run_plan(config: dict, run: str) -> RunPlan:
    return merged_run(config, "p4", run, RunPlan)


def run_dir(run: str) -> str:
    return f"{RESULTS}/models/p4/{run}"


def run_settings(config: dict, run: str) -> dict:
    """Settings of method `p4` (`settings.launch_check`): model spec and directory, train rows, `train`, `p4`."""
    plan = run_plan(config, run)
    return with_base_stamp(
        {
            "model": model_spec(config, plan.model),
            "base_dir": model_dir(config, plan.model),
            "data": train_data_path(plan.dataset),
            "train": plan.train,
            "p4": plan.method,
            "on_bad_row": dataset_on_bad_row(config, plan.dataset),
        },
        config,
        plan.model,
    )


def launcher_settings(config: dict, run: str) -> dict:
    """`config.plan.launcher_settings` of run `run`."""
    return run_launcher(config, "p4", run)


def from_config(config: dict, run: str) -> tuple[dict, dict]:
    """The launcher's resolver of method `p4` (`--config C --run R`)."""
    return run_settings(config, run), launcher_settings(config, run)


# ---------------------------------------------------------------------------------------------- labels


def vanilla_label(model: str) -> str:
    return f"{model}{STEP_SEP}0"


def untrained_label(run: str) -> str:
    return f"{run}{STEP_SEP}0"


def parse_label(config: dict, label: str) -> tuple[str, str]:
    """(kind, name): ("vanilla", model), ("untrained", run) or ("trained", run)."""
    name, sep, step = label.partition(STEP_SEP)
    if sep and step == "0":
        return ("untrained", name) if name in run_names(config) else ("vanilla", name)
    return "trained", label


def label_model(config: dict, label: str) -> str:
    """The declared model whose tokenizer and template the label's weights use."""
    kind, name = parse_label(config, label)
    return name if kind == "vanilla" else run_plan(config, name).model


def setting_label(tau: int) -> str:
    return f"dmtd-tau{int(tau)}"


def setting_params(config: dict, label: str, tau: int) -> dict:
    """Decoder parameters of a `dmtd` setting: τ, and the split for an untrained label (its model has no
    `config.dmtd`)."""
    kind, name = parse_label(config, label)
    params: dict = {"decoder": "dmtd", "tau": int(tau)}
    if kind == "untrained":
        method = run_plan(config, name).method
        e, d = run_plan(config, name).split
        params |= {"encoding_layers": e, "decoding_layers": d, "combine": method.get("combine", "add")}
    return params


# ------------------------------------------------------------------------------------------- tables


def table_spec(config: dict, name: str) -> dict:
    return (section(config).get("tables") or {}).get(name) or {}


def figure_spec(config: dict, name: str) -> dict:
    return (section(config).get("figures") or {}).get(name) or {}


def table_runs(config: dict, name: str) -> list[str]:
    """Runs shown by a quality table, in row order (Table 2: its groups' runs in order)."""
    spec = table_spec(config, name)
    if name == "table2":
        return [r for runs in (spec.get("groups") or {}).values() for r in runs]
    if name == "table5":
        return [spec["run"]] if spec.get("run") else []
    return list(spec.get("runs") or [])


def quality_rows(config: dict, name: str) -> list[tuple[str, int]]:
    """(label, τ) of every row of a quality table, vanilla rows as (label, 0)."""
    rows: list[tuple[str, int]] = []
    for run in table_runs(config, name):
        plan = run_plan(config, run)
        rows.append((vanilla_label(plan.model), 0))
        if name == "table5":
            spec = table_spec(config, name)
            rows += [(run, int(t)) for t in spec.get("taus") or []]
            if spec.get("untrained"):
                rows.append((untrained_label(run), plan.cycle))
        else:
            rows.append((run, plan.cycle))
    return list(dict.fromkeys(rows))


def tasks(config: dict) -> list[str]:
    return list(section(config).get("tasks") or {})


def task_metric(config: dict, task: str) -> str | None:
    return ((section(config).get("tasks") or {}).get(task) or {}).get("metric")


def columns(config: dict) -> list[str]:
    """The quality columns: the teacher-forced accuracy, then every task."""
    return [TF_COLUMN, *tasks(config)]


EVAL_KEYS = (
    "limit",
    "batch_size",
    "max_gen_toks",
    "apply_chat_template",
    "num_fewshot",
    "bootstrap_iters",
    "chat_template_kwargs",
)


def eval_settings(config: dict, task: str) -> dict:
    """`EvalSettings` overrides of `task`: `papers.p4.evaluation`, then `papers.p4.tasks.<task>`."""
    out: dict = {}
    for over in (section(config).get("evaluation") or {}, (section(config).get("tasks") or {}).get(task) or {}):
        out.update({k: v for k, v in over.items() if k in EVAL_KEYS})
    return out


def column_titles(config: dict) -> dict[str, str]:
    """Shown names of the quality columns (`tasks.<task>.title`, else the task's name)."""
    spec = section(config).get("tasks") or {}
    return {TF_COLUMN: "TF acc (val)", **{t: (spec.get(t) or {}).get("title") or t for t in tasks(config)}}


def overall_columns(config: dict) -> list[str]:
    """The columns averaged into "Overall" (mean over columns of score / vanilla score, §3.2)."""
    chosen = section(config).get("overall")
    return list(chosen) if chosen is not None else columns(config)


def targets_in_all(config: dict) -> list[str]:
    s = section(config)
    return list(s.get("in_all") if s.get("in_all") is not None else (*TABLES, *FIGURES))


def target_files(name: str) -> list[str]:
    return table_files("p4", name) if name in TABLES else figure_files("p4", name)


def all_targets(config: dict) -> list[str]:
    return [f for name in targets_in_all(config) for f in target_files(name)]


# ------------------------------------------------------------------------------- evaluation jobs


def tf_dataset(config: dict) -> str:
    return (section(config).get("teacher_forced") or {}).get("dataset") or section(config)["dataset"]


def tf_task(config: dict) -> str:
    return f"tf-{tf_dataset(config)}"


def result_path(label: str, task: str, setting: str) -> str:
    return f"{RESULTS}/decode/p4/{label}/{task}/{setting}.json"


def leaderboard_spec(config: dict) -> dict:
    return section(config).get("leaderboard") or {}


def speed_spec(config: dict) -> dict:
    return section(config).get("speed") or {}


def label_taus(config: dict) -> dict[str, list[int]]:
    """Every evaluated label (vanilla labels first) -> the τ its evaluation job runs (ascending; [] for vanilla):
    the union over the quality tables, and the leaderboard run at the speed job's τ (its choice reads them)."""
    want: dict[str, set[int]] = {}
    for name in QUALITY_TABLES:
        for label, tau in quality_rows(config, name):
            want.setdefault(label, set())
            if tau:
                want[label].add(tau)
    lb = leaderboard_spec(config)
    if lb.get("run"):
        plan = run_plan(config, lb["run"])
        want.setdefault(vanilla_label(plan.model), set())
        want.setdefault(lb["run"], set()).update({plan.cycle, *(int(t) for t in speed_spec(config).get("taus") or [])})
    order = sorted(want, key=lambda lab: (parse_label(config, lab)[0] != "vanilla", lab))
    return {lab: sorted(want[lab]) for lab in order}


def job_settings(config: dict, label: str) -> dict[str, dict]:
    """Setting -> decoder params of one evaluation job (vanilla: greedy; else `dmtd` at each τ)."""
    if parse_label(config, label)[0] == "vanilla":
        return {VANILLA_GEN: {"decoder": "greedy"}}
    return {setting_label(t): setting_params(config, label, t) for t in label_taus(config)[label]}


def tf_settings(config: dict, label: str) -> list[str]:
    if parse_label(config, label)[0] == "vanilla":
        return [VANILLA_TF]
    return [setting_label(t) for t in label_taus(config)[label]]


def job_results(config: dict, label: str) -> list[str]:
    """The result files of one evaluation job: teacher-forced settings, then each task's."""
    out = [result_path(label, tf_task(config), s) for s in tf_settings(config, label)]
    return out + [result_path(label, t, s) for t in tasks(config) for s in job_settings(config, label)]


def table_results(config: dict, name: str) -> list[str]:
    """Result files a quality table reads (each row's teacher-forced and task results at its τ)."""
    out = [f for row in table_layout(config, name) for f in (*row["files"].values(), *row["vanilla"].values())]
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------- speed


def speed_run(config: dict) -> str | None:
    return speed_spec(config).get("run")


def speed_settings(config: dict) -> dict[str, dict]:
    """Setting -> decoder params of the speed job: greedy, then `dmtd` at each τ of `speed.taus`."""
    out: dict[str, dict] = {VANILLA_GEN: {"decoder": "greedy"}}
    for t in sorted(int(x) for x in speed_spec(config).get("taus") or []):
        out[setting_label(t)] = {"decoder": "dmtd", "tau": t}
    return out


def speed_task(batch_size: int) -> str:
    return f"speed-b{int(batch_size)}"


def speed_results(config: dict) -> list[str]:
    run = speed_run(config)
    if run is None:
        return []
    return [
        result_path(run, speed_task(b), s)
        for b in speed_spec(config).get("batch_sizes") or [1]
        for s in speed_settings(config)
    ]


def layer_costs_path(run: str, batch_size: int) -> str:
    return f"{RESULTS}/analysis/p4/{run}/layer_costs-b{int(batch_size)}.json"


def selected_tau_path(run: str) -> str:
    return f"{RESULTS}/analysis/p4/{run}/selected_tau.json"


def fig5_fit_path() -> str:
    return f"{RESULTS}/analysis/p4/fig5_fit.json"


# ----------------------------------------------------------------------------------------- leaderboard


def leaderboard_entries(config: dict) -> list[LeaderboardEntry]:
    """Paper 4's leaderboard rows (`papers.p4.leaderboard`): the run's model with `dmtd` at its training τ, and
    (`selected: true`) at the τ with the best speed among those whose teacher-forced retention on the held-out
    split is at least `retention` (`selected_tau.json`, merged into the row's parameters when its job runs)."""
    spec = leaderboard_spec(config)
    if not spec.get("run"):
        return []
    run = spec["run"]
    plan = run_plan(config, run)
    checkpoint = f"{run_dir(run)}/model"
    rows = [
        LeaderboardEntry(
            "p4",
            f"p4-{run}-{setting_label(plan.cycle)}",
            f"P4 DMTD {plan.title}, τ={plan.cycle} (trained)",
            {"decoder": "dmtd", "tau": plan.cycle},
            checkpoint,
            plan.model,
        )
    ]
    if spec.get("selected", True):
        rows.append(
            LeaderboardEntry(
                "p4",
                f"p4-{run}-dmtd-selected",
                f"P4 DMTD {plan.title}, τ chosen on validation (≥ {float(spec.get('retention', 0.9)):.0%} retention)",
                {"decoder": "dmtd"},
                checkpoint,
                plan.model,
                params_from=selected_tau_path(run),
            )
        )
    return rows


# ------------------------------------------------------------------------------------------- layouts


def row_title(config: dict, name: str, label: str, tau: int) -> str:
    """A quality table's row title in the paper's style (Table 1 `MTD3`, Table 2 `E0D8`, Table 4 `Ours`, Table 5
    `3→4`; `Vanilla`; Table 5's extra `untrained (τ=3)`)."""
    kind, run = parse_label(config, label)
    if kind == "vanilla":
        return "Vanilla"
    plan = run_plan(config, run)
    if kind == "untrained":
        return f"untrained E{plan.split[0]}D{plan.split[1]} (τ={tau})"
    if name == "table1":
        return f"MTD{tau}"
    if name == "table2":
        return f"E{plan.split[0]}D{plan.split[1]}"
    if name == "table4":
        return "Ours"
    return f"{plan.cycle}→{tau}"


def table_layout(config: dict, name: str) -> list[dict]:
    """The rows of a quality table as its script takes them (JSON-ready): block (Table 2: the group; Table 4: the
    model), title, label, τ, the result file of each column, and the vanilla row's files (retention)."""
    spec = table_spec(config, name)
    groups = spec.get("groups") or {}
    out = []
    for label, tau in quality_rows(config, name):
        kind, name_ = parse_label(config, label)
        model = label_model(config, label)
        if name == "table2":
            block = next((g for g, runs in groups.items() if kind != "vanilla" and name_ in runs), None)
        elif name == "table4":
            block = model
        else:
            block = None
        vanilla = vanilla_label(model)
        out.append(
            {
                "block": block,
                "title": row_title(config, name, label, tau),
                "label": label,
                "tau": tau,
                "files": column_files(config, label, tau),
                "vanilla": column_files(config, vanilla, 0),
            }
        )
    if name == "table2":  # one Vanilla row on top, then the groups in order
        van = [r for r in out if r["title"] == "Vanilla"][:1]
        rest = [r for r in out if r["title"] != "Vanilla"]
        order = {g: i for i, g in enumerate(groups)}
        out = van + sorted(rest, key=lambda r: order.get(r["block"], len(order)))
    return out


def column_files(config: dict, label: str, tau: int) -> dict[str, str]:
    """Quality column -> result file of a label at τ (0: vanilla)."""
    tf = VANILLA_TF if tau == 0 else setting_label(tau)
    gen = VANILLA_GEN if tau == 0 else setting_label(tau)
    return {
        TF_COLUMN: result_path(label, tf_task(config), tf),
        **{t: result_path(label, t, gen) for t in tasks(config)},
    }
