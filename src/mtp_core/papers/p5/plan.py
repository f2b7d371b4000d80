"""Paper 5's experiment plan: the validated `papers.p5` config section turned into jobs, result paths and decoder
parameters (its checks: `papers.p5.checks`; used by `workflow/rules/p5*.smk`, the scripts and the tests).

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
from typing import Any

from ...config.layout import figure_files, table_files
from ...config.plan import launcher_settings as run_launcher
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError, model_spec
from ...models.plan import model_dir
from ...train.finetune import with_base_stamp
from .settings import FrontierSettings
from .splits import SPLITS

RESULTS = "results"
REFERENCE = "greedy"
TABLES = ("table1", "table2")
FIGURES = ("fig1", "fig2", "fig3", "fig4", "fig5")
FRONTIER_FIGURES = {"fig1": "acceptance", "fig4": "acceptance", "fig5": "acceptance", "fig2": "throughput"}
HEADS_SOURCES = ("train", "hub", "local")
DECODE_KEYS = ("acceptance", "temperature", "posterior_threshold", "posterior_alpha")
HUMANEVAL_PROBLEMS = 164


def section(config: dict) -> dict:
    return (config.get("papers") or {}).get("p5") or {"enabled": False}


def model(config: dict) -> str:
    return section(config)["model"]


def tasks(config: dict) -> dict[str, dict]:
    return dict(section(config).get("tasks") or {})


def task_title(config: dict, task: str) -> str:
    return tasks(config)[task].get("title") or task


# ------------------------------------------------------------------------------------------------- prompts


def split_path(task: str, split: str) -> str:
    return f"{RESULTS}/prompts/p5/{task}/{split}.jsonl"


def split_files(config: dict) -> list[str]:
    return [split_path(t, s) for t in tasks(config) for s in SPLITS]


SPLIT_REPORT = f"{RESULTS}/prompts/p5/split_report.json"


def math_datasets(config: dict) -> list[str]:
    return list(dict.fromkeys(t["dataset"] for t in tasks(config).values() if t["source"] == "math"))


# --------------------------------------------------------------------------------------------------- heads


def heads_names(config: dict) -> list[str]:
    return list(section(config).get("heads") or {})


def heads_spec(config: dict, name: str) -> dict:
    return dict((section(config).get("heads") or {})[name])


def heads_source(config: dict, name: str) -> str:
    return heads_spec(config, name).get("source", "train")


def trained_heads(config: dict) -> list[str]:
    return [h for h in heads_names(config) if heads_source(config, h) == "train"]


def heads_run_dir(name: str) -> str:
    return f"{RESULTS}/models/p5/heads/{name}"


def heads_dir(name: str) -> str:
    """The heads in the one save format (`heads.save_heads`): trained or imported."""
    return f"{heads_run_dir(name)}/heads"


def heads_record(name: str) -> str:
    return f"{heads_run_dir(name)}/train.json"


def selfdistill_dir(config: dict) -> str:
    return f"{RESULTS}/data/p5/selfdistill/{model(config)}"


HEADS_MODULE_KEYS = (
    "arch",
    "num_heads",
    "num_layers",
    "lm_head",
    "draft_vocab",
    "init",
    "prefix",
    "dropout",
    "loss",
    "head_weights",
    "holdout",
    "seed",
)


def heads_settings(config: dict, name: str) -> dict:
    """Settings of `mtp-repro train --method p5_heads` for trained heads `name` (`settings.launch_check`)."""
    spec = heads_spec(config, name)
    train = {"threads": config.get("threads"), **copy.deepcopy(spec.get("train") or {}), "final_dir": "heads"}
    return with_base_stamp(
        {
            "model": model_spec(config, model(config)),
            "base_dir": model_dir(config, model(config)),
            "data": selfdistill_dir(config),
            "heads": {k: spec[k] for k in HEADS_MODULE_KEYS if k in spec},
            "train": train,
        },
        config,
        model(config),
    )


def launcher_settings(config: dict, name: str) -> dict:
    """`config.plan.launcher_settings` of heads `name` (`papers.p5.heads.<name>.launcher`)."""
    return run_launcher(config, "p5", name, "heads")


def from_config(config: dict, run: str) -> tuple[dict, dict]:
    """The launcher's resolver of method `p5_heads` (`--config C --run <heads name>`)."""
    if run not in trained_heads(config):
        raise ConfigError(f"papers.p5.heads: no trained heads {run!r} (trained: {', '.join(trained_heads(config))})")
    return heads_settings(config, run), launcher_settings(config, run)


# ------------------------------------------------------------------------------------------------ frontier


def search_heads(config: dict) -> list[str]:
    return list((section(config).get("search") or {}).get("heads") or [])


def analysis_dir(heads: str, task: str) -> str:
    return f"{RESULTS}/analysis/p5/{heads}/{task}"


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


def frontier_files(heads: str, task: str) -> list[str]:
    return [f"{analysis_dir(heads, task)}/{f}" for f in FRONTIER_FILES]


def frontier_settings(config: dict) -> FrontierSettings:
    s = section(config)
    search, sched, reg = s.get("search") or {}, s.get("scheduler") or {}, s.get("regimes") or {}
    kw: dict[str, Any] = {
        "depths": tuple(search.get("depths", (1, 2, 3, 4))),
        "budgets": tuple(search.get("budgets", (16, 32, 64))),
        "tolerance": float(search.get("tolerance", 0.4)),
        "max_children_per_parent": int(search.get("max_children_per_parent", 10)),
        "default_tree": search.get("default_tree", "mc_sim_7b_63"),
        "frontier_mode": (s.get("debias") or {}).get("frontier_mode", "global"),
        "candidate_mode": (s.get("throughput") or {}).get("candidate_mode", "per-depth-frontier"),
        "score_feature": sched.get("score_feature", "path_value_greedy_depth4"),
        "hysteresis": tuple(sched.get("hysteresis", (1.0, 0.5))),
        "policy_period": int(sched.get("policy_period", 1)),
        "regimes_tree": reg.get("tree", "mc_sim_7b_63"),
        "target_accept": int(reg.get("target_accept", 1)),
        "price_reps": int((s.get("throughput") or {}).get("reps", 5)),
        "include_greedy": bool((s.get("throughput") or {}).get("include_greedy", False)),
    }
    if sched.get("taus") is not None:
        kw["taus"] = tuple(float(t) for t in sched["taus"])
    return FrontierSettings(**kw)


def decode_regime(config: dict) -> dict[str, Any]:
    """The decoding regime of `papers.p5.decoding` (greedy acceptance, or typical with its temperature, posterior
    threshold and alpha): what the heads methods decode with and the bank is chosen under."""
    d = section(config)["decoding"]
    if d["acceptance"] == "greedy":
        return {"acceptance": "greedy"}
    return {k: d[k] for k in DECODE_KEYS}


def search_engine(config: dict) -> str:
    """The frontier's engine follows the decoding regime (`engines`): the exact offline simulation for greedy
    acceptance (temperature 0), the paper's rollouts for typical acceptance (T > 0), where the simulation does
    not hold; so a bank is always chosen in the regime its decoders run."""
    return "offline" if decode_regime(config)["acceptance"] == "greedy" else "rollout"


def frontier_job_settings(config: dict) -> dict:
    """What the frontier job needs beside `FrontierSettings`: calibration, price measurement (with the decoding
    jobs' torch threads: prices measured with other threads would not price their steps), the engine and the
    decoding regime its rollouts run."""
    s = section(config)
    return {
        "calibration": dict(s["calibration"]),
        "max_prompt_tokens": s.get("max_prompt_tokens"),
        "max_rows": int(s["throughput"]["max_rows"]),
        "threads": bench_settings(config)["threads"],
        "engine": search_engine(config),
        "decode": {} if search_engine(config) == "offline" else decode_regime(config),
    }


# ------------------------------------------------------------------------------------------------ decoding


def methods(config: dict) -> dict[str, dict]:
    return dict(section(config).get("methods") or {})


def method_title(config: dict, method: str) -> str:
    return methods(config)[method].get("title") or method


def is_reference(config: dict, method: str) -> bool:
    return methods(config)[method]["decoder"] == REFERENCE


def decode_result(config: dict, task: str, method: str) -> str:
    label = REFERENCE if is_reference(config, method) else method
    return f"{RESULTS}/decode/p5/{model(config)}/prompts-p5-{task}/{label}.json"


def table_spec(config: dict, name: str) -> dict:
    return dict((section(config).get("tables") or {})[name])


def figure_spec(config: dict, name: str) -> dict:
    return dict((section(config).get("figures") or {})[name])


def decode_tasks(config: dict) -> list[str]:
    return list(table_spec(config, "table1")["tasks"])


def decode_methods(config: dict) -> list[str]:
    """The methods Table 1 shows that decode (the greedy reference runs in every job anyway)."""
    return [m for m in table_spec(config, "table1")["methods"] if not is_reference(config, m)]


def method_params(config: dict, task: str, method: str) -> dict[str, Any]:
    """Decoder parameters (with `decoder`) of `method` decoding `task`: heads names become their directories,
    `entmtp` gets the bank of its heads on this task; the heads decoders get `papers.p5.decoding`'s regime
    (`decode_regime`); other decoders (greedy, the sampling vanilla) keep their own parameters."""
    m = methods(config)[method]
    params = {k: copy.deepcopy(v) for k, v in m.items() if k != "title"}
    if m["decoder"] == REFERENCE:
        return params
    if "heads" not in params:
        return params
    params["heads"] = heads_dir(params["heads"])
    if m["decoder"] == "entmtp":
        params["bank"] = f"{analysis_dir(m['heads'], task)}/bank.json"
    regime = decode_regime(config)
    if regime["acceptance"] != "greedy":
        params.update(regime)
    return params


def job_decoders(config: dict, task: str) -> dict[str, dict]:
    """Bench label -> params of the task's decoding job: greedy first, then Table 1's methods."""
    out: dict[str, dict] = {REFERENCE: {}}
    out.update({m: method_params(config, task, m) for m in decode_methods(config)})
    return out


def job_results(config: dict, task: str) -> list[str]:
    ref = f"{RESULTS}/decode/p5/{model(config)}/prompts-p5-{task}/{REFERENCE}.json"
    return [ref] + [decode_result(config, task, m) for m in decode_methods(config)]


def job_inputs(config: dict, task: str) -> list[str]:
    """The heads and banks a task's decoding job reads."""
    out: list[str] = []
    for m in decode_methods(config):
        spec = methods(config)[m]
        if "heads" in spec:
            out.append(heads_dir(spec["heads"]))
        if spec["decoder"] == "entmtp":
            out.append(f"{analysis_dir(spec['heads'], task)}/bank.json")
    return list(dict.fromkeys(out))


def decode_settings(config: dict) -> dict[str, Any]:
    d = section(config).get("decoding") or {}
    return {"max_new_tokens": int(d.get("max_new_tokens", 64)), "batch_size": int(d.get("batch_size", 1))}


BENCH_KEYS = ("warmup", "repeats", "threads")


def bench_settings(config: dict) -> dict[str, int]:
    out = {k: (config.get("bench") or {}).get(k) for k in BENCH_KEYS}
    out.update({k: v for k, v in (section(config).get("bench") or {}).items() if k in BENCH_KEYS})
    return out


# ---------------------------------------------------------------------------------------- tables, figures


VANILLA_DECODERS = ("greedy", "sample")


def vanilla_method(config: dict) -> str | None:
    """Table 1's vanilla row (its "× vanilla" divides by it): the first of its methods decoding one token per
    forward (greedy, or sampling as the paper's vanilla), None without one."""
    return next(
        (m for m in table_spec(config, "table1")["methods"] if methods(config)[m]["decoder"] in VANILLA_DECODERS), None
    )


def table1_rows(config: dict) -> list[dict]:
    """Per (task, method): its result, the job's greedy reference, the task's vanilla row, titles."""
    spec, vanilla = table_spec(config, "table1"), vanilla_method(config)
    return [
        {
            "task": t,
            "task_title": task_title(config, t),
            "method": m,
            "title": method_title(config, m),
            "path": decode_result(config, t, m),
            "reference": decode_result_reference(config, t),
            "vanilla": None if vanilla is None else decode_result(config, t, vanilla),
        }
        for t in spec["tasks"]
        for m in spec["methods"]
    ]


def decode_result_reference(config: dict, task: str) -> str:
    return f"{RESULTS}/decode/p5/{model(config)}/prompts-p5-{task}/{REFERENCE}.json"


def table2_heads(config: dict) -> str:
    return table_spec(config, "table2").get("heads") or search_heads(config)[0]


def figure_heads(config: dict) -> str:
    return (section(config).get("figures") or {}).get("heads") or search_heads(config)[0]


def figure_tasks(config: dict) -> list[str]:
    out: list[str] = []
    for f in FIGURES:
        spec = figure_spec(config, f)
        out += spec.get("tasks") or [spec["task"]]
    return list(dict.fromkeys(out))


def table_inputs(config: dict, name: str) -> list[str]:
    if name == "table1":
        return list(dict.fromkeys(p for r in table1_rows(config) for p in (r["path"], r["reference"])))
    h = table2_heads(config)
    return [
        f"{analysis_dir(h, t)}/{f}" for t in table_spec(config, name)["tasks"] for f in ("search.json", "self.json")
    ]


def figure_inputs(config: dict) -> list[str]:
    h = figure_heads(config)
    files = ("search.json", "self.json", "throughput.json", "regimes.csv", "regimes.json")
    return [f"{analysis_dir(h, t)}/{f}" for t in figure_tasks(config) for f in files]


def targets_in_all(config: dict) -> list[str]:
    s = section(config)
    return list(s.get("in_all") if s.get("in_all") is not None else (*TABLES, *FIGURES))


def target_files(name: str) -> list[str]:
    return table_files("p5", name) if name in TABLES else figure_files("p5", name)


def all_targets(config: dict) -> list[str]:
    return [f for name in targets_in_all(config) for f in target_files(name)]


def leaderboard_entries(config: dict) -> list[LeaderboardEntry]:
    """Paper 5's rows (`papers.p5.leaderboard`: `methods`, `task` whose bank EntMTP uses) on the leaderboard's
    model; their heads and banks are the rows' inputs (trained from `papers.p5.model`, checked against the
    leaderboard's model by `leaderboard.plan.check`)."""
    spec = section(config).get("leaderboard") or {}
    task = spec.get("task")
    rows = []
    for m in spec.get("methods") or []:
        params = method_params(config, task, m)
        needs = tuple(p for p in (params.get("heads"), params.get("bank")) if p)
        title = method_title(config, m) + (f" ({task_title(config, task)} bank)" if "bank" in params else "")
        rows.append(LeaderboardEntry("p5", f"p5-{m}", f"P5 {title}", params, model=model(config), needs=needs))
    return rows
