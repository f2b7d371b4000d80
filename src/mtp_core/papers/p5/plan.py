"""Paper 5's experiment plan: the validated `papers.p5` section (`settings.P5Settings`) turned into jobs, result paths
and decoder parameters (its checks: `checks.Checks`, the plan's base; read by `workflow/rules/p5.smk`, the command
line and the tests; the scripts get what they need as rule params and inputs).

Names (all derived here):

* **Tasks** `papers.p5.tasks.<task>` (source humaneval | math | sharegpt, sizes of the test / calib / train
  splits): `results/prompts/p5/<task>/{test,calib,train}.jsonl` and `results/prompts/p5/split_report.json`.
* **Heads** `papers.p5.heads.<name>`: trained here (`arch` + `train`: self-distillation on the model's answers to
  every task's training prompts, `results/data/p5/selfdistill/<model>/`, then the launcher method `p5_heads` in
  `results/models/p5/heads/<name>/`, the heads in its `heads/`) or imported (`source: hub | local`, a published
  checkpoint converted into the one save format at the same `heads/`).
* **Frontier** per (heads of `search.heads`, task): `results/analysis/p5/<heads>/<task>/` (calibration table,
  search, self values, throughput, bank, regimes).
* **Methods** `papers.p5.methods.<m>`: a decoder with its parameters, `heads` a heads name; `entmtp` reads the bank
  of its heads on the task it decodes. One decoding job per task runs greedy and every method a table shows, side
  by side (bench protocol): `results/decode/p5/<model>/prompts-p5-<task>/<m>.json` (a greedy method is the job's
  greedy reference, `greedy.json`).
* **Tables** `table1` (methods x tasks), `table2` (biased vs self); **figures** `fig1`/`fig4`/`fig5` (acceptance
  frontiers), `fig2` (throughput frontier), `fig3` (regimes), built by one figure job.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ...config import layout
from ...config.registry import LeaderboardEntry
from ...config.settings import model_spec
from ...models.plan import model_dir, model_inputs
from ...train.finetune import with_base_stamp
from .checks import Checks
from .settings import FrontierSettings, HeadsTrainConfig, P5Settings
from .splits import HELD_OUT, SPLITS

REFERENCE = "greedy"
DECODE_KEYS = ("acceptance", "temperature", "posterior_threshold", "posterior_alpha")
VANILLA_DECODERS = ("greedy", "sample")
MATH_SPLITS = ("train", "validation", "test")
HEADS_MODULE_KEYS = tuple(f.name for f in fields(HeadsTrainConfig))
FRONTIER_FILES = (
    "table.npz",
    "table.json",
    "search.json",
    "self.json",
    "throughput.json",
    "bank.json",
    "regimes.json",
    "regimes.csv",
)


class P5Plan(Checks):
    paper = "p5"
    Settings = P5Settings
    TABLES = ("table1", "table2")
    FIGURES = ("fig1", "fig2", "fig3", "fig4", "fig5")
    OWN_RULES = FIGURES  # one job draws them all (they read the same frontier files)
    TRAIN_METHOD, TRAINING_TABLE = "p5_heads", "heads"  # trainings of heads (`papers.p5.heads`)
    SPLIT_REPORT = str(Path(layout.prompts("p5/split_report")).with_suffix(".json"))  # beside the tasks' prompts

    def task_title(self, task: str) -> str:
        return self.s.tasks[task].title or task

    def task_titles(self) -> dict[str, str]:
        return {t: self.task_title(t) for t in self.s.tasks}

    # --------------------------------------------------------------------------------------------- prompts

    def split_path(self, task: str, split: str) -> str:
        return layout.prompts(f"p5/{task}/{split}")

    def split_files(self, split: str) -> list[str]:
        """Every task's `split` prompts, in the order of `papers.p5.tasks`."""
        return [self.split_path(t, split) for t in self.s.tasks]

    def split_outputs(self) -> dict[str, str]:
        """The split job's files by name, `<task>_<split>`."""
        return {f"{t}_{s}": self.split_path(t, s) for t in self.s.tasks for s in SPLITS}

    def split_inputs(self) -> dict[str, str]:
        """The split files of the math datasets the tasks read, by name `<dataset>_<split>`, and where paper 5 has
        leaderboard rows the prompt files the leaderboard decodes, `held_out_<set>`: no task keeps a prompt of
        theirs, so the heads never train on a prompt their leaderboard rows are timed on."""
        math = dict.fromkeys(t.dataset for t in self.s.tasks.values() if t.source == "math")
        out = {f"{d}_{s}": layout.data_split(d, s) for d in math for s in MATH_SPLITS}
        board = self.config.get("leaderboard") or {}
        if self.s.leaderboard.methods and board.get("enabled", True):
            out |= {f"{HELD_OUT}{ps}": layout.prompts(ps) for ps in board.get("prompt_sets") or {}}
        return out

    # ----------------------------------------------------------------------------------------------- heads

    def trained_heads(self) -> list[str]:
        return [h for h, spec in self.s.heads.items() if spec.source == "train"]

    def imported_heads(self) -> list[str]:
        return [h for h, spec in self.s.heads.items() if spec.source != "train"]

    def trainings(self) -> list[str]:
        return self.trained_heads()

    def training_dir(self, heads: str) -> str:
        return self.run_dir(f"heads/{heads}")

    def heads_dir(self, heads: str) -> str:
        """The heads in the one save format (`heads.save_heads`): trained or imported."""
        return f"{self.training_dir(heads)}/heads"

    def final_model(self, heads: str) -> str:
        """A heads training's export: the heads (`heads_dir`)."""
        return self.heads_dir(heads)

    def train_inputs(self, heads: str) -> dict[str, list[str] | str]:
        return {"model": model_inputs(self.config, self.s.model), "data": self.selfdistill_dir()}

    def selfdistill_dir(self) -> str:
        return layout.data_dir(f"p5/selfdistill/{self.s.model}")

    def heads_module(self, heads: str) -> dict[str, Any]:
        """The `HeadsTrainConfig` keys heads `heads` set."""
        return {k: v for k, v in self.section["heads"][heads].items() if k in HEADS_MODULE_KEYS}

    def run_settings(self, heads: str) -> dict:
        """Settings of `mtp-repro train --method p5_heads` for trained heads `heads` (`settings.launch_check`)."""
        model = self.s.model
        train = {"threads": self.config["threads"], **copy.deepcopy(self.s.heads[heads].train), "final_dir": "heads"}
        return with_base_stamp(
            {
                "model": model_spec(self.config, model),
                "base_dir": model_dir(self.config, model),
                "data": self.selfdistill_dir(),
                "heads": self.heads_module(heads),
                "train": train,
            },
            self.config,
            model,
        )

    # -------------------------------------------------------------------------------------------- frontier

    def search_heads(self) -> list[str]:
        return list(self.s.search.heads or ())

    def frontier_dir(self, heads: str, task: str) -> str:
        return self.analysis_dir(f"{heads}/{task}")

    def frontier_outputs(self, heads: str = "{heads}") -> list[str]:
        """Every task's frontier files of `heads` (one job: the model loads and the verification is priced once)."""
        return [f"{self.frontier_dir(heads, t)}/{f}" for t in self.s.tasks for f in FRONTIER_FILES]

    def bank(self, heads: str, task: str) -> str:
        return f"{self.frontier_dir(heads, task)}/bank.json"

    def frontier_settings(self) -> FrontierSettings:
        s = self.s
        return FrontierSettings(
            depths=tuple(s.search.depths),
            budgets=tuple(s.search.budgets),
            tolerance=s.search.tolerance,
            max_children_per_parent=s.search.max_children_per_parent,
            default_tree=s.search.default_tree,
            frontier_mode=s.debias.frontier_mode,
            candidate_mode=s.throughput.candidate_mode,
            score_feature=s.scheduler.score_feature,
            taus=tuple(s.scheduler.taus),
            hysteresis=tuple(s.scheduler.hysteresis),
            policy_period=s.scheduler.policy_period,
            regimes_tree=s.regimes.tree,
            target_accept=s.regimes.target_accept,
            price_reps=s.throughput.reps,
            include_greedy=s.throughput.include_greedy,
        )

    def decode_regime(self) -> dict[str, Any]:
        """The decoding regime of `papers.p5.decoding` (greedy acceptance, or typical with its temperature,
        posterior threshold and alpha): what the heads methods decode with and the bank is chosen under."""
        d = self.s.decoding
        return {"acceptance": "greedy"} if d.acceptance == "greedy" else {k: getattr(d, k) for k in DECODE_KEYS}

    def search_engine(self) -> str:
        """The frontier's engine follows the decoding regime (`engines`): the exact offline simulation for greedy
        acceptance (temperature 0), the paper's rollouts for typical acceptance (T > 0), where the simulation does
        not hold; so a bank is always chosen in the regime its decoders run."""
        return "offline" if self.s.decoding.acceptance == "greedy" else "rollout"

    def frontier_job_settings(self) -> dict:
        """What the frontier job needs beside `FrontierSettings`: calibration, price measurement (with the decoding
        jobs' torch threads: prices measured with other threads would not price their steps), the engine and the
        decoding regime its rollouts run."""
        engine = self.search_engine()
        return {
            "calibration": asdict(self.s.calibration),
            "max_prompt_tokens": self.s.max_prompt_tokens,
            "max_rows": self.s.throughput.max_rows,
            "threads": self.bench_settings()["threads"],
            "engine": engine,
            "decode": {} if engine == "offline" else self.decode_regime(),
        }

    # -------------------------------------------------------------------------------------------- decoding

    def method_title(self, method: str) -> str:
        return self.s.methods[method].get("title") or method

    def is_reference(self, method: str) -> bool:
        return self.s.methods[method]["decoder"] == REFERENCE

    def result(self, task: str, label: str) -> str:
        """`results/decode/p5/<model>/prompts-p5-<task>/<label>.json`."""
        return self.result_path(self.s.model, layout.prompts_task(f"p5-{task}"), label)

    def decode_result(self, task: str, method: str) -> str:
        return self.result(task, REFERENCE if self.is_reference(method) else method)

    def check_file(self, task: str = "{task}") -> str:
        """The decoding job's check that the simulation predicts every heads decoder's forwards."""
        return self.result(task, "simulation_check")

    def decode_tasks(self) -> list[str]:
        return list(self.s.tables.table1.tasks)

    def decode_methods(self) -> list[str]:
        """The methods Table 1 shows that decode (the greedy reference runs in every job anyway)."""
        return [m for m in self.s.tables.table1.methods if not self.is_reference(m)]

    def decode_outputs(self, task: str = "{task}") -> list[str]:
        """A task's decoding results: the greedy reference, then Table 1's methods."""
        return [self.result(task, label) for label in (REFERENCE, *self.decode_methods())]

    def method_params(self, task: str, method: str) -> dict[str, Any]:
        """Decoder parameters (with `decoder`) of `method` decoding `task`: heads names become their directories,
        `entmtp` gets the bank of its heads on this task; the heads decoders get `papers.p5.decoding`'s regime
        (`decode_regime`); other decoders (greedy, the sampling vanilla) keep their own parameters."""
        m = self.s.methods[method]
        params = {k: copy.deepcopy(v) for k, v in m.items() if k != "title"}
        if m["decoder"] == REFERENCE or "heads" not in params:
            return params
        params["heads"] = self.heads_dir(m["heads"])
        if m["decoder"] == "entmtp":
            params["bank"] = self.bank(m["heads"], task)
        regime = self.decode_regime()
        if regime["acceptance"] != "greedy":
            params.update(regime)
        return params

    def job_decoders(self, task: str) -> dict[str, dict]:
        """Bench label -> params of the task's decoding job: greedy first, then Table 1's methods."""
        return {REFERENCE: {}} | {m: self.method_params(task, m) for m in self.decode_methods()}

    def job_inputs(self, task: str) -> list[str]:
        """The heads and banks a task's decoding job reads."""
        out: list[str] = []
        for m in self.decode_methods():
            spec = self.s.methods[m]
            if "heads" in spec:
                out.append(self.heads_dir(spec["heads"]))
            if spec["decoder"] == "entmtp":
                out.append(self.bank(spec["heads"], task))
        return list(dict.fromkeys(out))

    def decode_settings(self) -> dict[str, Any]:
        return {"max_new_tokens": self.s.decoding.max_new_tokens, "batch_size": self.s.decoding.batch_size}

    # ------------------------------------------------------------------------------------- tables, figures

    def vanilla_method(self) -> str | None:
        """Table 1's vanilla row (its "× vanilla" divides by it): the first of its methods decoding one token per
        forward (greedy, or sampling as the paper's vanilla), None without one."""
        methods = self.s.tables.table1.methods
        return next((m for m in methods if self.s.methods[m]["decoder"] in VANILLA_DECODERS), None)

    def table1_rows(self) -> list[dict]:
        """Per (task, method): its result, the job's greedy reference, the task's vanilla row, titles."""
        spec, vanilla = self.s.tables.table1, self.vanilla_method()
        return [
            {
                "task": t,
                "task_title": self.task_title(t),
                "method": m,
                "title": self.method_title(m),
                "path": self.decode_result(t, m),
                "reference": self.result(t, REFERENCE),
                "vanilla": None if vanilla is None else self.decode_result(t, vanilla),
            }
            for t in spec.tasks
            for m in spec.methods
        ]

    def table2_heads(self) -> str:
        return self.s.tables.table2.heads or self.search_heads()[0]

    def figure_heads(self) -> str:
        return self.s.figures.heads or self.search_heads()[0]

    def figure_tasks(self) -> list[str]:
        figures = [asdict(getattr(self.s.figures, f)) for f in self.FIGURES]
        return list(dict.fromkeys(t for f in figures for t in f.get("tasks") or [f["task"]]))

    def report_inputs(self, name: str) -> dict[str, list[str]]:
        """Table 1: its results and references, then each task's simulation check; Table 2: each task's search and
        self values, in the order of its tasks."""
        if name == "table1":
            results = dict.fromkeys(p for r in self.table1_rows() for p in (r["path"], r["reference"]))
            return {"files": [*results, *(self.check_file(t) for t in self.s.tables.table1.tasks)]}
        h, tasks = self.table2_heads(), self.s.tables.table2.tasks
        return {"files": [f"{self.frontier_dir(h, t)}/{f}" for t in tasks for f in ("search.json", "self.json")]}

    def report_params(self, name: str) -> dict[str, Any]:
        """Table 1: its rows (`table1_rows`) and each task's simulation check; Table 2: its section and the tasks'
        titles."""
        if name == "table1":
            return {"rows": self.table1_rows(), "checks": {t: self.check_file(t) for t in self.decode_tasks()}}
        return {"table2": self.section["tables"]["table2"], "titles": self.task_titles()}

    def figure_inputs(self) -> list[str]:
        h, files = self.figure_heads(), ("search.json", "self.json", "throughput.json", "regimes.csv", "regimes.json")
        return [f"{self.frontier_dir(h, t)}/{f}" for t in self.figure_tasks() for f in files]

    def leaderboard(self) -> list[LeaderboardEntry]:
        """Paper 5's rows (`papers.p5.leaderboard`: `methods`, `task` whose bank EntMTP uses) on the leaderboard's
        model; their heads and banks are the rows' inputs (trained from `papers.p5.model`, checked against the
        leaderboard's model by `leaderboard.plan.check`)."""
        task, rows = self.s.leaderboard.task, []
        for m in self.s.leaderboard.methods:
            params = self.method_params(task, m)
            needs = tuple(p for p in (params.get("heads"), params.get("bank")) if p)
            title = self.method_title(m) + (f" ({self.task_title(task)} bank)" if "bank" in params else "")
            rows.append(LeaderboardEntry("p5", f"p5-{m}", f"P5 {title}", params, model=self.s.model, needs=needs))
        return rows
