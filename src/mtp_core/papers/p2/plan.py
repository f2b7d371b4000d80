"""Paper 2's experiment plan: the validated `papers.p2` section turned into trainings, jobs, result files, tables
and figures. One place, used by the workflow (`workflow/rules/p2_helpers.smk`), the scripts and the tests.

Names (derived here only):

* **Runs.** `papers.p2.runs.<name>` overrides the shared `model`, `dataset`, `method` (P2Config keys) and `train`
  (TrainConfig keys), merged key by key. `extend: {from, new_heads, group, source}` makes a looped-extension run
  (§3.3): the source run's heads plus `new_heads` copies, trained on the source's trunk (its base model, or the
  trunk it trained), frozen with the old heads, with the source's merged method (the run's own `method` keys
  override it; `trunk` is always frozen).
* **Mains.** The trunk a run decodes with: its base model (a frozen trunk) or the run itself (a trained trunk,
  `results/models/p2/<run>/model`). Run names may not equal model names, so the two never collide.
* **Settings** `h<D>`: decoding with D drafts, for every D of `depths` (each run's K and the `loops`), on every
  run (D < K: its first D heads; D > K: training-free looped extension, depth d drafting with head
  ((d-1) mod K)+1), so that the acceptance rule has the same outputs for every run.
* **Jobs and files**: `p2_features` (`results/models/p2/features/<key>/`), `p2_train`
  (`results/models/p2/<run>/{train.json, model/}`), `p2_reference` per main (greedy continuations of every prompt
  set and the main head's Top-N mass: `results/decode/p2/<main>/prompts-<set>/greedy.json`,
  `results/analysis/p2/<main>/topn_mass.{csv,json}`), `p2_acceptance` per run (AR/CAR of every setting from the
  teacher-forced simulation, `results/decode/p2/<run>/prompts-<set>/<setting>.json`, and validation metrics
  `results/analysis/p2/<run>/val.json`), `p2_speed` per speed experiment (the bench protocol:
  `results/decode/p2/speed/<experiment>/<row>.json`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...config import ConfigError, deep_merge, model_spec
from ...model_plan import model_dir, with_base_stamp
from ...registry import LeaderboardEntry
from ...results import figure_files, table_files

RESULTS = "results"
REFERENCE = "greedy"
TABLES = ("table1", "table2", "table3", "table4", "table5", "table6", "table7", "table8")
FIGURES = ("fig3", "fig4", "fig5", "fig6", "fig7", "fig9", "fig10", "fig11", "fig12", "fig13", "fig14")
SPEED_EXPERIMENTS = ("fig4", "fig5", "table8")  # read a bench of their own rows
CURVE_FIGURES = ("fig7", "fig10")  # read a run's training curves
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def section(config: dict) -> dict:
    return (config.get("papers") or {}).get("p2") or {"enabled": False}


# ------------------------------------------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunPlan:
    """One training: base model and data, title, merged method / train settings, and its looped extension."""

    name: str
    model: str
    dataset: str
    title: str
    method: dict = field(default_factory=dict)  # P2Config keys
    train: dict = field(default_factory=dict)  # TrainConfig keys
    extend: dict | None = None  # {from, new_heads, group, source}

    @property
    def trunk_trained(self) -> bool:
        return self.method.get("trunk", "frozen") != "frozen"


def run_names(config: dict) -> list[str]:
    return list(section(config).get("runs") or {})


def run_plan(config: dict, run: str, _seen: tuple[str, ...] = ()) -> RunPlan:
    """The merged settings of `run` (module docstring); `train.threads` defaults to the config's `threads`."""
    s = section(config)
    runs = s.get("runs") or {}
    if run not in runs:
        raise ConfigError(f"papers.p2.runs: no run {run!r} (runs: {', '.join(runs) or 'none'})")
    if run in _seen:
        raise ConfigError(f"papers.p2.runs.{run}.extend: a cycle ({' -> '.join((*_seen, run))})")
    r = runs[run] or {}
    ext = r.get("extend")
    if ext:
        src = run_plan(config, ext["from"], (*_seen, run))
        method = deep_merge(src.method, r.get("method"))
        method["num_heads"] = int(src.method.get("num_heads", 1)) + int(ext["new_heads"])
        method.update(trunk="frozen", trunk_layers=0)  # the trunk (the source's, trained or not) and old heads freeze
        model, dataset = src.model, src.dataset
        ext = {"source": "latest", "group": None, **ext}
    else:
        method = deep_merge(s.get("method") or {}, r.get("method"))
        model, dataset = r.get("model", s.get("model")), r.get("dataset", s.get("dataset"))
    train = deep_merge(s.get("train") or {}, r.get("train"))
    train.setdefault("threads", config.get("threads"))
    return RunPlan(run, model, dataset, r.get("title") or run, method, train, ext or None)


def num_heads(config: dict, run: str) -> int:
    return int(run_plan(config, run).method.get("num_heads", 1))


def run_dir(run: str) -> str:
    return f"{RESULTS}/models/p2/{run}"


def run_model(run: str) -> str:
    """The run's export: its heads (and its trained trunk, when the trunk trained)."""
    return f"{run_dir(run)}/model"


def run_record(run: str) -> str:
    return f"{run_dir(run)}/train.json"


def main_of(config: dict, run: str) -> str:
    """The trunk run decodes with: its base model (frozen trunk) or the run (a trained trunk, as its source's
    for an extension)."""
    plan = run_plan(config, run)
    if plan.extend:
        return main_of(config, plan.extend["from"])
    return run if plan.trunk_trained else plan.model


def is_run(config: dict, main: str) -> bool:
    return main in (section(config).get("runs") or {})


def heads_path(config: dict, run: str) -> str:
    """The directory a decoder reads the heads of `run` from (`train.heads_dir`)."""
    return f"{run_model(run)}/heads" if run_plan(config, run).trunk_trained else run_model(run)


# ------------------------------------------------------------------------------------------- features


def feature_key(config: dict, run: str) -> str | None:
    """The feature cache a run reads (None: it runs its trunk). Runs of one key read the same rows."""
    plan = run_plan(config, run)
    m = plan.method
    if plan.extend:
        return None  # a continued pre-training stage: the source's trunk, run live (its windows differ in count)
    trunk = m.get("trunk", "frozen")
    if not m.get("feature_cache", True) or trunk == "all":
        return None
    layers = int(m.get("trunk_layers", 0))
    return f"{plan.model}-{plan.dataset}-s{m.get('seq_len', 4096)}-w{m.get('window_seed', 0)}-t{layers}"


def feature_dir(key: str) -> str:
    return f"{RESULTS}/models/p2/features/{key}"


def feature_keys(config: dict, runs: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Key -> {model, dataset, seq_len, val_tokens, window_seed, trunk_layers, rows (the most any run of it
    reads)} for `runs` (default: all)."""
    out: dict[str, dict[str, Any]] = {}
    for run in run_names(config) if runs is None else runs:
        key = feature_key(config, run)
        if key is None:
            continue
        plan = run_plan(config, run)
        m, t = plan.method, plan.train
        rows = int(t["max_steps"]) * int(t.get("global_batch_size", 128))
        entry = out.setdefault(
            key,
            {
                "model": plan.model,
                "dataset": plan.dataset,
                "seq_len": int(m.get("seq_len", 4096)),
                "val_tokens": int(m.get("val_tokens", 100_000)),
                "window_seed": int(m.get("window_seed", 0)),
                "trunk_layers": int(m.get("trunk_layers", 0)),
                "rows": 0,
            },
        )
        entry["rows"] = max(entry["rows"], rows)
    return out


# ------------------------------------------------------------------------------------------- trainings


def shards_index(dataset: str) -> str:
    return f"{RESULTS}/data/{dataset}/shards/index.json"


def run_settings(config: dict, run: str) -> dict:
    """Settings of method `p2` (`train.launch_check`) for `run`."""
    plan = run_plan(config, run)
    key = feature_key(config, run)
    extend = None
    if plan.extend:
        e = plan.extend
        extend = {"heads": run_model(e["from"]), "new_heads": int(e["new_heads"]), "group": e["group"]}
        extend["source"] = e["source"]
    return with_base_stamp(
        {
            "model": model_spec(config, plan.model),
            "base_dir": model_dir(config, plan.model),
            "trunk_dir": run_model(main) if plan.extend and is_run(config, main := main_of(config, run)) else None,
            "shards": shards_index(plan.dataset),
            "features": feature_dir(key) if key else None,
            "extend": extend,
            "train": plan.train,
            "p2": plan.method,
        },
        config,
        plan.model,
    )


def launcher_settings(config: dict, run: str) -> dict:
    s = section(config)
    merged = deep_merge(config.get("launcher") or {}, s.get("launcher"))
    return deep_merge(merged, ((s.get("runs") or {}).get(run) or {}).get("launcher"))


def from_config(config: dict, run: str) -> tuple[dict, dict]:
    """The launcher's resolver of method `p2` (`--config C --run R`)."""
    return run_settings(config, run), launcher_settings(config, run)


# ------------------------------------------------------------------------------------ settings and files


def loops(config: dict) -> list[int]:
    return sorted({int(d) for d in section(config).get("loops") or []})


def setting_label(depth: int) -> str:
    return f"h{int(depth)}"


def depths(config: dict) -> list[int]:
    """The draft counts D every acceptance job simulates: each run's K and every loop depth."""
    return sorted({num_heads(config, r) for r in run_names(config)} | set(loops(config)))


def prompt_sets(config: dict) -> dict[str, int | None]:
    """Prompt set -> prompts taken (`specbench`-like sets with categories: per category)."""
    return dict(section(config).get("prompt_sets") or {})


def reference_path(main: str, prompt_set: str) -> str:
    return f"{RESULTS}/decode/p2/{main}/prompts-{prompt_set}/{REFERENCE}.json"


def topn_path(main: str, ext: str = "json") -> str:
    return f"{RESULTS}/analysis/p2/{main}/topn_mass.{ext}"


def acceptance_path(run: str, prompt_set: str, setting: str) -> str:
    return f"{RESULTS}/decode/p2/{run}/prompts-{prompt_set}/{setting}.json"


def validation_path(run: str) -> str:
    return f"{RESULTS}/analysis/p2/{run}/val.json"


def acceptance_outputs(config: dict, run: str) -> list[str]:
    return [acceptance_path(run, ps, setting_label(d)) for ps in prompt_sets(config) for d in depths(config)]


def max_depth(config: dict) -> int:
    return max(depths(config))


def speed_label(run: str, depth: int) -> str:
    return f"{run}-{setting_label(depth)}"


def speed_rows(config: dict, experiment: str) -> list[dict[str, Any]]:
    """The `mtp-spec` rows of a speed experiment: {label, run, depth, title, main}; Fig. 4: every run at its K;
    Fig. 5 / Table 8: the listed (run, depth) strategies. The baseline row is among them."""
    spec = experiment_spec(config, experiment)
    rows = spec.get("rows") or [{"run": r} for r in spec.get("runs", [])]
    out = []
    for r in rows:
        k = num_heads(config, r["run"])
        depth = int(r.get("depth") or k)
        title = r.get("title") or run_plan(config, r["run"]).title
        main = main_of(config, r["run"])
        out.append(
            {"label": speed_label(r["run"], depth), "run": r["run"], "depth": depth, "title": title, "main": main}
        )
    return out


def speed_mains(config: dict, experiment: str) -> list[str]:
    """The trunks the rows decode with, in row order (runs that trained their trunks each bring their own)."""
    return list(dict.fromkeys(r["main"] for r in speed_rows(config, experiment)))


def greedy_label(config: dict, experiment: str, main: str) -> str:
    """The greedy row of a trunk: `greedy` for the first (the bench's reference), `greedy-<main>` for others."""
    return REFERENCE if main == speed_mains(config, experiment)[0] else f"{REFERENCE}-{main}"


def speed_path(experiment: str, label: str) -> str:
    return f"{RESULTS}/decode/p2/speed/{experiment}/{label}.json"


def speed_decoders(config: dict, experiment: str) -> dict[str, dict[str, Any]]:
    """Bench label -> decoder parameters: a greedy row per trunk (the first is `greedy`), then `mtp-spec` with each
    row's heads and depth."""
    out: dict[str, dict[str, Any]] = {
        greedy_label(config, experiment, m): {"decoder": REFERENCE} for m in speed_mains(config, experiment)
    }
    for r in speed_rows(config, experiment):
        out[r["label"]] = {"decoder": "mtp-spec", "heads": heads_path(config, r["run"]), "num_drafts": r["depth"]}
    return out


def speed_trunks(config: dict, experiment: str) -> dict[str, str]:
    """Bench label -> the trunk it decodes with."""
    out = {greedy_label(config, experiment, m): m for m in speed_mains(config, experiment)}
    return out | {r["label"]: r["main"] for r in speed_rows(config, experiment)}


def speed_outputs(config: dict, experiment: str) -> list[str]:
    return [speed_path(experiment, label) for label in speed_decoders(config, experiment)]


def speed_baseline(config: dict, experiment: str) -> str:
    """The row label speedups are relative to (the paper: DeepSeek MTP with K = 1)."""
    b = experiment_spec(config, experiment)["baseline"]
    return speed_label(b, num_heads(config, b))


# ------------------------------------------------------------------------------------------ experiments


def experiment_spec(config: dict, name: str) -> dict:
    kind = "tables" if name in TABLES else "figures"
    return (section(config).get(kind) or {}).get(name) or {}


def experiment_runs(config: dict, name: str) -> list[str]:
    """The runs a table or figure shows (their trainings and acceptance jobs)."""
    spec = experiment_spec(config, name)
    runs = [r for b in spec.get("blocks", []) for r in b["runs"]] + list(spec.get("runs", []))
    runs += [r["run"] for r in spec.get("rows", [])] + ([spec["run"]] if spec.get("run") else [])
    if spec.get("baseline"):
        runs.append(spec["baseline"])
    return list(dict.fromkeys(runs))


def experiment_inputs(config: dict, name: str) -> list[str]:
    """Every file table or figure `name` reads."""
    runs = experiment_runs(config, name)
    if name in SPEED_EXPERIMENTS:
        return speed_outputs(config, name)
    if name in CURVE_FIGURES:
        return [run_record(r) for r in runs]
    if name == "fig6":
        return [topn_path(topn_main(config), "csv")]
    if name == "table3":
        return []
    if name == "table4":
        return [run_record(r) for r in runs]
    out = []
    for r in runs:
        out += acceptance_outputs(config, r) + [validation_path(r)]
        out += [reference_path(main_of(config, r), ps) for ps in prompt_sets(config)]
    if name in ("table2", "table5", "table6") and pretrained_base(config):
        model = section(config)["model"]
        out += [reference_path(model, ps) for ps in prompt_sets(config)]
    return list(dict.fromkeys(out))


def pretrained_base(config: dict) -> bool:
    """Whether the section's model is a pretrained base that trained trunks are compared with (identity of greedy
    outputs, KL(base ‖ main)); not for a scratch model, whose runs train it from random weights."""
    return config["models"][section(config)["model"]]["source"] != "scratch"


def topn_main(config: dict) -> str:
    """The trunk of Figure 6 (`figures.fig6.run`'s, else the section's model)."""
    run = experiment_spec(config, "fig6").get("run")
    return main_of(config, run) if run else section(config)["model"]


def mains(config: dict, names: list[str] | None = None) -> list[str]:
    """Mains whose references some experiment reads (all experiments by default)."""
    names = list(TABLES + FIGURES) if names is None else names
    out = []
    for n in names:
        out += [main_of(config, r) for r in experiment_runs(config, n)]
        if n in ("table2", "table5", "table6") and pretrained_base(config):
            out.append(section(config)["model"])
        if n == "fig6":
            out.append(topn_main(config))
    return list(dict.fromkeys(out))


def targets_in_all(config: dict) -> list[str]:
    s = section(config)
    return list(s.get("in_all") if s.get("in_all") is not None else (*TABLES, *FIGURES))


def target_files(name: str) -> list[str]:
    return table_files("p2", name) if name in TABLES else figure_files("p2", name)


def all_targets(config: dict) -> list[str]:
    return [f for name in targets_in_all(config) for f in target_files(name)]


def configured(config: dict, name: str) -> bool:
    """Whether table or figure `name` is configured (its section names what it shows)."""
    return bool(experiment_spec(config, name)) or name in ("table3", "fig6")


def leaderboard_entries(config: dict) -> list[LeaderboardEntry]:
    """Paper 2's rows (`papers.p2.leaderboard.rows`: {run, depth}): `mtp-spec` with the run's heads at D drafts
    (D > K: the training-free loop) on the leaderboard model, or on the run's trained trunk."""
    rows = []
    for r in (section(config).get("leaderboard") or {}).get("rows", []):
        run, plan = r["run"], run_plan(config, r["run"])
        k = num_heads(config, run)
        depth = int(r.get("depth") or k)
        loop = f", loop to {depth}" if depth > k else ""
        rows.append(
            LeaderboardEntry(
                "p2",
                f"p2-{run}-{setting_label(depth)}",
                f"P2 {plan.title} K={k}{loop}",
                {"decoder": "mtp-spec", "heads": heads_path(config, run), "num_drafts": depth},
                checkpoint=run_model(main_of(config, run)) if is_run(config, main_of(config, run)) else None,
                model=plan.model,
                needs=(run_model(run),),
            )
        )
    return rows


# -------------------------------------------------------------------------------------------------- checks


def check(config: dict) -> None:
    """What the schema cannot express, before any job; raises ConfigError naming the key.

    Models, datasets (pretrain_text) and prompt sets are declared; run names are safe and not model names; every
    run's merged method and train build (P2Config with N >= 1, K >= 1, beta >= 0 ...; TrainConfig and the
    launcher's processes); extensions name an earlier run with a frozen trunk and a valid group; every experiment
    names declared runs (speed experiments: one main, a baseline among the rows); the reference continuation
    reaches D + 1 tokens past the budget for the deepest D; leaderboard rows run on the leaderboard's model."""
    from ...train.launch.settings import check_training
    from .train import P2Config

    s = section(config)
    models, datasets = config["models"], config["datasets"]
    runs = s.get("runs") or {}
    if not runs:
        raise ConfigError("papers.p2.runs: at least one run is needed")
    for name in prompt_sets(config):
        if name not in config["prompt_sets"]:
            raise ConfigError(f"papers.p2.prompt_sets.{name}: prompt set {name!r} is not declared")
    for run in runs:
        where = f"papers.p2.runs.{run}"
        if not _NAME.match(run):
            raise ConfigError(f"{where}: run names use letters, digits, '_', '.', '-' only")
        if run in models:
            raise ConfigError(f"{where}: a run may not be named like a model ({run!r} is a model)")
        ext = (runs[run] or {}).get("extend")
        if ext and ext["from"] not in runs:
            raise ConfigError(f"{where}.extend.from: run {ext['from']!r} is not declared in papers.p2.runs")
        plan = run_plan(config, run)
        if plan.model not in models:
            raise ConfigError(f"{where}.model: model {plan.model!r} is not declared")
        if plan.dataset not in datasets or datasets[plan.dataset]["kind"] != "pretrain_text":
            raise ConfigError(f"{where}.dataset: {plan.dataset!r} is not a declared pretrain_text dataset")
        try:
            P2Config.from_dict(plan.method)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}.method (merged with papers.p2.method): {e}") from None
        if ext:
            src = run_plan(config, ext["from"])
            k_src = int(src.method.get("num_heads", 1))
            if not 1 <= int(ext.get("group") or k_src) <= k_src:
                raise ConfigError(f"{where}.extend.group: {ext.get('group')} heads, run {ext['from']!r} has {k_src}")
        tc, _ = check_training(where, plan.train, launcher_settings(config, run))
        if tc.warmup_steps >= tc.max_steps > 0:
            raise ConfigError(f"{where}.train: warmup_steps {tc.warmup_steps} >= max_steps {tc.max_steps}")
    _check_experiments(config, runs)
    extra = int(s.get("reference_extra_tokens") or 0)
    if extra < max_depth(config) + 1:
        raise ConfigError(
            f"papers.p2.reference_extra_tokens: {extra} < {max_depth(config) + 1} (the deepest D + 1): the last "
            "step of a simulated decode compares drafts past the budget"
        )
    lb = config.get("leaderboard") or {}
    for i, r in enumerate((s.get("leaderboard") or {}).get("rows", [])):
        key = f"papers.p2.leaderboard.rows[{i}]"
        if r["run"] not in runs:
            raise ConfigError(f"{key}.run: run {r['run']!r} is not declared in papers.p2.runs")
        if lb.get("enabled") and run_plan(config, r["run"]).model != lb.get("model"):
            raise ConfigError(
                f"{key}: heads of run {r['run']!r} are trained on {run_plan(config, r['run']).model!r}, not on the "
                f"leaderboard's model {lb.get('model')!r}"
            )


def _check_experiments(config: dict, runs: dict) -> None:
    for name in (*TABLES, *FIGURES):
        kind = "tables" if name in TABLES else "figures"
        for run in experiment_runs(config, name):
            if run not in runs:
                raise ConfigError(f"papers.p2.{kind}.{name}: run {run!r} is not declared in papers.p2.runs")
        if name in SPEED_EXPERIMENTS and configured(config, name):
            rows = speed_rows(config, name)
            if speed_baseline(config, name) not in {r["label"] for r in rows}:
                raise ConfigError(f"papers.p2.{kind}.{name}.baseline: not among the rows at its own K")
        spec = experiment_spec(config, name)
        if spec.get("prompt_set") and spec["prompt_set"] not in prompt_sets(config):
            raise ConfigError(
                f"papers.p2.{kind}.{name}.prompt_set: {spec['prompt_set']!r} is not in papers.p2.prompt_sets"
            )
        if spec.get("depth") and int(spec["depth"]) not in depths(config):
            raise ConfigError(f"papers.p2.{kind}.{name}.depth: {spec['depth']} is not in papers.p2.loops")
    for name in targets_in_all(config):
        if not configured(config, name):
            raise ConfigError(f"papers.p2.in_all: {name} is not configured (papers.p2.tables / figures)")


# ------------------------------------------------------------------------------------------------ report


def run_files(config: dict, run: str) -> dict[str, Any]:
    """What the report reads of one run: title, K, main, its acceptance files by set and D, validation,
    its main's references, its training record."""
    k = num_heads(config, run)
    main = main_of(config, run)
    return {
        "title": run_plan(config, run).title,
        "heads": k,
        "main": main,
        "acceptance": {
            ps: {str(d): acceptance_path(run, ps, setting_label(d)) for d in depths(config)}
            for ps in prompt_sets(config)
        },
        "validation": validation_path(run),
        "reference": {ps: reference_path(main, ps) for ps in prompt_sets(config)},
        "record": run_record(run),
        "method": run_plan(config, run).method,
        "train": run_plan(config, run).train,
    }


def report_params(config: dict, name: str) -> dict[str, Any]:
    """Everything table or figure `name` shows, JSON-ready (the report script's `params.spec`)."""
    spec = experiment_spec(config, name)
    model = section(config)["model"]
    out: dict[str, Any] = {
        "name": name,
        "spec": spec,
        "prompt_sets": list(prompt_sets(config)),
        "runs": {r: run_files(config, r) for r in experiment_runs(config, name)},
        "base": {
            "model": model,
            "reference": {ps: reference_path(model, ps) for ps in prompt_sets(config)}
            if pretrained_base(config)
            else None,
        },
    }
    if name in SPEED_EXPERIMENTS:
        out["speed"] = {
            "rows": speed_rows(config, name),
            "paths": {r["label"]: speed_path(name, r["label"]) for r in speed_rows(config, name)},
            "baseline": speed_baseline(config, name),
        }
    if name == "fig6":
        out["topn"] = topn_path(topn_main(config), "csv")
        out["base"]["model"] = topn_main(config)
    if name == "table3":
        out["model_spec"] = model_spec(config, model)
        out["model_dir"] = model_dir(config, model)
        out["heads"] = sorted({num_heads(config, r) for r in run_names(config)})
    return out


def windows_spec(config: dict, main: str) -> dict[str, Any]:
    """The windows a main's validation metrics and Top-N mass read: its run's (a trained trunk) or the section's
    data and method (a base model)."""
    if is_run(config, main):
        plan = run_plan(config, main)
        dataset, m = plan.dataset, plan.method
    else:
        s = section(config)
        dataset, m = s["dataset"], s.get("method") or {}
    return {
        "shards": shards_index(dataset),
        "seq_len": int(m.get("seq_len", 4096)),
        "val_tokens": int(m.get("val_tokens", 100_000)),
        "window_seed": int(m.get("window_seed", 0)),
        "windows": int(section(config).get("validation_windows", 64)),
    }


BENCH_KEYS = ("warmup", "repeats", "threads")


def speed_bench(config: dict) -> dict[str, int]:
    """The bench protocol's settings for paper 2: the foundation's `bench`, then `papers.p2.speed.bench`."""
    out = {k: (config.get("bench") or {}).get(k) for k in BENCH_KEYS}
    out.update({k: v for k, v in ((section(config).get("speed") or {}).get("bench") or {}).items() if k in BENCH_KEYS})
    return out
