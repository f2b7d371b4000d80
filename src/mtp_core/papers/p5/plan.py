"""Paper 5's experiment plan: the validated `papers.p5` config section turned into jobs, result paths, decoder
parameters and checks (used by `workflow/rules/p5*.smk`, the scripts and the tests).

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

from ...config import ConfigError, deep_merge, model_spec
from ...decoding import decoder_class, decoders
from ...io import InputError
from ...masks.tree import published_trees
from ...model_plan import model_dir, with_base_stamp
from ...registry import LeaderboardEntry
from ...results import figure_files, table_files
from .scheduler import POLICIES, feature_depth
from .splits import PROMPT_FORMATS, SOURCES, SPLITS
from .stages import FrontierSettings

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
    """Settings of `mtp-repro train --method p5_heads` for trained heads `name` (`train.launch_check`)."""
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
    """The top-level `launcher`, then `papers.p5.launcher`, then `heads.<name>.launcher`, key by key."""
    merged = deep_merge(config.get("launcher") or {}, section(config).get("launcher"))
    return deep_merge(merged, heads_spec(config, name).get("launcher"))


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
    }
    if sched.get("taus") is not None:
        kw["taus"] = tuple(float(t) for t in sched["taus"])
    return FrontierSettings(**kw)


def frontier_job_settings(config: dict) -> dict:
    """What the frontier job needs beside `FrontierSettings`: calibration and price measurement (with the decoding
    jobs' torch threads: prices measured with other threads would not price their steps)."""
    s = section(config)
    return {
        "calibration": dict(s.get("calibration") or {}),
        "max_prompt_tokens": s.get("max_prompt_tokens"),
        "max_rows": int((s.get("throughput") or {}).get("max_rows", 64)),
        "threads": bench_settings(config)["threads"],
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
    `entmtp` gets the bank of its heads on this task; tree decoders get `papers.p5.decoding`'s acceptance."""
    m = methods(config)[method]
    params = {k: copy.deepcopy(v) for k, v in m.items() if k != "title"}
    if m["decoder"] == REFERENCE:
        return params
    if "heads" in params:
        params["heads"] = heads_dir(params["heads"])
    if m["decoder"] == "entmtp":
        params["bank"] = f"{analysis_dir(m['heads'], task)}/bank.json"
    d = section(config).get("decoding") or {}
    if d.get("acceptance", "greedy") != "greedy":
        params.update({k: d[k] for k in DECODE_KEYS if k in d})
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


def table1_rows(config: dict) -> list[dict]:
    """Per (task, method): its result, the job's greedy reference, titles."""
    spec = table_spec(config, "table1")
    return [
        {
            "task": t,
            "task_title": task_title(config, t),
            "method": m,
            "title": method_title(config, m),
            "path": decode_result(config, t, m),
            "reference": decode_result_reference(config, t),
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
    model; their heads and banks are the rows' inputs."""
    spec = section(config).get("leaderboard") or {}
    task = spec.get("task")
    rows = []
    for m in spec.get("methods") or []:
        params = method_params(config, task, m)
        needs = tuple(p for p in (params.get("heads"), params.get("bank")) if p)
        title = method_title(config, m) + (f" ({task_title(config, task)} bank)" if "bank" in params else "")
        rows.append(LeaderboardEntry("p5", f"p5-{m}", f"P5 {title}", params, needs=needs))
    return rows


# -------------------------------------------------------------------------------------------------- checks


def _need(table: dict, name: str, key: str, kind: str) -> None:
    if name not in table:
        raise ConfigError(f"{key}: {kind} {name!r} is not declared (declared: {', '.join(table) or 'none'})")


def check(config: dict) -> None:
    """Cross-references and settings JSON schema cannot express (raises ConfigError naming the key): the model and
    math datasets are declared; splits fit their pools (HumanEval: 164 problems; more would overlap) and no two
    tasks share a pool; trained heads' training settings build with their launcher; heads predict at least as deep
    as the searched depths, the published default tree and the score feature; methods name registered decoders
    with known parameters, declared heads, published trees, and EntMTP's heads are searched; τ_off <= τ_on;
    budgets give non-empty windows; tables, figures and the leaderboard name declared tasks and methods, and the
    leaderboard rows run on the leaderboard's model."""
    from ...train.launch.settings import check_training
    from .train import HeadsTrainConfig

    s = section(config)
    _need(config["models"], model(config), "papers.p5.model", "model")
    if s.get("prompt_format", "chat") not in PROMPT_FORMATS:
        raise ConfigError(f"papers.p5.prompt_format: one of {', '.join(PROMPT_FORMATS)}")
    pools: dict[tuple, str] = {}
    for t, spec in tasks(config).items():
        key = f"papers.p5.tasks.{t}"
        if spec["source"] not in SOURCES:
            raise ConfigError(f"{key}.source: {spec['source']!r} is not one of {', '.join(SOURCES)}")
        pool = (spec["source"], spec.get("dataset"))
        if pool in pools:
            raise ConfigError(f"{key}: draws from the same prompts as task {pools[pool]!r}: their splits would overlap")
        pools[pool] = t
        if spec["source"] == "math":
            _need(config["datasets"], spec.get("dataset"), f"{key}.dataset", "dataset")
            if config["datasets"][spec["dataset"]]["kind"] not in ("synthetic_math", "metamathqa"):
                raise ConfigError(f"{key}.dataset: {spec['dataset']!r} is not a math dataset")
        if spec["source"] == "humaneval" and sum(int(spec[x]) for x in SPLITS) > HUMANEVAL_PROBLEMS:
            raise ConfigError(
                f"{key}: test + calib + train = {sum(int(spec[x]) for x in SPLITS)} prompts exceed HumanEval's "
                f"{HUMANEVAL_PROBLEMS} problems: the splits would overlap"
            )
    fs = _frontier_settings(config)
    deepest = max(fs.depths)
    tree_depths = {n: max(len(p) for p in t) for n, t in published_trees().items()}
    for h in heads_names(config):
        key = f"papers.p5.heads.{h}"
        spec = heads_spec(config, h)
        src = heads_source(config, h)
        if src not in HEADS_SOURCES:
            raise ConfigError(f"{key}.source: {src!r} is not one of {', '.join(HEADS_SOURCES)}")
        if src == "train":
            try:
                HeadsTrainConfig.from_dict({k: spec[k] for k in HEADS_MODULE_KEYS if k in spec})
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{key}: {e}") from None
            check_training(key, {**(spec.get("train") or {}), "final_dir": "heads"}, launcher_settings(config, h))
        elif "id" not in spec and "path" not in spec:
            raise ConfigError(f"{key}: source {src} needs `id` (hub) or `path` (local)")
        k = int(spec.get("num_heads", 4))
        if h in search_heads(config):
            if k < deepest:
                raise ConfigError(f"{key}.num_heads: {k} heads, fewer than the search depth {deepest} (search.depths)")
            if feature_depth(fs.score_feature) > k:
                raise ConfigError(f"papers.p5.scheduler.score_feature: {fs.score_feature} reads more than {k} heads")
    for i, h in enumerate(search_heads(config)):
        _need(section(config).get("heads") or {}, h, f"papers.p5.search.heads[{i}]", "heads")
    if fs.default_tree not in tree_depths:
        raise ConfigError(f"papers.p5.search.default_tree: no published tree {fs.default_tree!r}")
    for b in fs.budgets:
        lo, hi = int(b * (1 - fs.tolerance)), int(b * (1 + fs.tolerance))
        if hi < 2 or hi < lo:  # searched trees have 2 nodes or more (the 1-node start is not a row)
            raise ConfigError(
                f"papers.p5.search.budgets: budget {b} with tolerance {fs.tolerance} has no window "
                f"([{lo}, {hi}] holds no searched tree: they have 2 nodes or more)"
            )
    for label, m in methods(config).items():
        key = f"papers.p5.methods.{label}"
        if m["decoder"] not in decoders():
            raise ConfigError(f"{key}.decoder: decoder {m['decoder']!r} is not registered")
        if "heads" in m:
            _need(section(config).get("heads") or {}, m["heads"], f"{key}.heads", "heads")
        tree = m.get("tree")
        if isinstance(tree, str):
            if tree not in tree_depths:
                raise ConfigError(f"{key}.tree: no published tree {tree!r} ({', '.join(sorted(tree_depths))})")
            k = int(heads_spec(config, m["heads"]).get("num_heads", 4)) if "heads" in m else 0
            if tree_depths[tree] > k:
                raise ConfigError(f"{key}: tree {tree} is {tree_depths[tree]} deep, heads {m['heads']!r} predict {k}")
        if m["decoder"] == "entmtp":
            if m.get("heads") not in search_heads(config):
                raise ConfigError(f"{key}.heads: EntMTP reads the bank of searched heads (papers.p5.search.heads)")
            if m.get("policy", "binary_tau") not in POLICIES:
                raise ConfigError(f"{key}.policy: one of {', '.join(POLICIES)}")
            on, off = m.get("tau_on", m.get("tau")), m.get("tau_off", m.get("tau"))
            if on is not None and off is not None and float(off) > float(on):
                raise ConfigError(f"{key}: tau_off {off} > tau_on {on} (the hysteresis needs tau_off <= tau_on)")
        try:
            decoder_class(label, {k: v for k, v in m.items() if k != "title"})
        except InputError as e:
            raise ConfigError(f"{key}: {e}") from None
    if any(f > 1 for f in fs.hysteresis):
        raise ConfigError("papers.p5.scheduler.hysteresis: factors > 1 would make tau_off > tau_on")
    for name in TABLES:
        spec = table_spec(config, name)
        for i, t in enumerate(spec["tasks"]):
            _need(tasks(config), t, f"papers.p5.tables.{name}.tasks[{i}]", "task")
        for i, m in enumerate(spec.get("methods") or []):
            _need(methods(config), m, f"papers.p5.tables.{name}.methods[{i}]", "method")
    for name in FIGURES:
        spec = figure_spec(config, name)
        for i, t in enumerate(spec.get("tasks") or [spec.get("task")]):
            _need(tasks(config), t, f"papers.p5.figures.{name}.task" + (f"s[{i}]" if "tasks" in spec else ""), "task")
    lb = s.get("leaderboard") or {}
    if lb.get("methods"):
        _need(tasks(config), lb.get("task"), "papers.p5.leaderboard.task", "task")
        for i, m in enumerate(lb["methods"]):
            _need(methods(config), m, f"papers.p5.leaderboard.methods[{i}]", "method")
        board = config.get("leaderboard") or {}
        if board.get("enabled") and board.get("model") != model(config):
            raise ConfigError(
                f"papers.p5.leaderboard: the heads are trained on {model(config)!r}, the leaderboard runs "
                f"{board.get('model')!r}: set papers.p5.model to the leaderboard's model"
            )


def _frontier_settings(config: dict) -> FrontierSettings:
    try:
        return frontier_settings(config)
    except ValueError as e:
        raise ConfigError(f"papers.p5: {e}") from None
