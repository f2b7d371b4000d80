"""Paper 2's experiment plan: the validated `papers.p2` section turned into trainings, jobs, result files, tables
and figures. One place, used by the workflow (`workflow/rules/p2_helpers.smk`), the scripts and the tests.

Names (derived here only):

* **Runs.** `papers.p2.runs.<name>` overrides the shared `model`, `dataset`, `method` (P2Config keys) and `train`
  (TrainConfig keys), merged key by key. `extend: {from, new_heads, group, source}` makes a looped-extension run
  (§3.3): the source run's heads plus `new_heads` copies of a group of heads, trained on the source's trunk (its
  base model, or the trunk it trained), frozen with the old heads, with the source's merged method (the run's own
  `method` keys override it; `trunk` is always frozen). `group` defaults to the last stage's group: all K heads of
  a trained run, or the group the source extension itself copied, so that with `source: latest` each stage copies
  the group the previous stage trained (4 -> 8 -> 12: heads 9-12 <- 5-8, not the first stage's 1-4; A13).
* **Seeds.** A run with `seeds: n` trains n times: as itself (`train.seed`) and as replicates `<run>-seed<i>`
  (i = 1 .. n-1, `train.seed + i`), full runs in every other respect (training, acceptance, validation), which
  Tables 1 and 7 read for the spread of each number over seeds. With a frozen trunk and its feature cache the
  windows are the same for every seed: the seed moves the heads' initialisation (and nothing of the trunk).
* **Mains.** The trunk a run decodes with: its base model (a frozen trunk) or the run itself (a trained trunk,
  `results/models/p2/<run>/model`). Run names may not equal model names, so the two never collide.
* **Settings** `h<D>`: decoding with D drafts, for every D of `depths` (each run's K and the `loops`), on every
  run (D < K: its first D heads; D > K: training-free looped extension, depth d drafting with head
  ((d-1) mod K)+1), so that the acceptance rule has the same outputs for every run.
Tables, figures and the speed experiments: `experiments`; the checks: `checks`.

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
from dataclasses import dataclass, replace
from typing import Any

from ...config.plan import RunPlan as CoreRunPlan
from ...config.plan import launcher_settings as run_launcher
from ...config.plan import merged_run, paper_section, run_entry
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError, deep_merge, model_spec
from ...models.plan import model_dir
from ...train.finetune import with_base_stamp

RESULTS = "results"
REFERENCE = "greedy"
REPLICATE = re.compile(r"(.+)-seed([1-9][0-9]*)")  # `<run>-seed<i>`: seed replicate i of a declared run


def section(config: dict) -> dict:
    return paper_section(config, "p2")


# ------------------------------------------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunPlan(CoreRunPlan):
    """One training (`config.plan.RunPlan`; `method`: P2Config keys) and its looped extension."""

    extend: dict | None = None  # {from, new_heads, group, source}

    @property
    def trunk_trained(self) -> bool:
        return self.method.get("trunk", "frozen") != "frozen"


def declared_runs(config: dict) -> dict[str, dict]:
    """`papers.p2.runs` as written."""
    return section(config).get("runs") or {}


def seed_count(config: dict, run: str) -> int:
    """How many trainings a declared run has (`seeds`; absent: one)."""
    return int((declared_runs(config).get(run) or {}).get("seeds") or 1)


def replicate_name(run: str, i: int) -> str:
    return f"{run}-seed{i}"


def replicates(config: dict, run: str) -> list[str]:
    """The seed replicates of a declared run (module docstring), without the run itself."""
    return [replicate_name(run, i) for i in range(1, seed_count(config, run))]


def replica_of(config: dict, run: str) -> tuple[str, int]:
    """(the declared run, the seed index) of a run name: a declared run is its own replicate 0; an unknown name
    comes back as it is (whoever looks it up names it)."""
    m = None if run in declared_runs(config) else REPLICATE.fullmatch(run)
    if m and m[1] in declared_runs(config) and int(m[2]) < seed_count(config, m[1]):
        return m[1], int(m[2])
    return run, 0


def run_names(config: dict) -> list[str]:
    """Every training: the declared runs, each followed by its seed replicates."""
    return [r for run in declared_runs(config) for r in (run, *replicates(config, run))]


def run_plan(config: dict, run: str, _seen: tuple[str, ...] = ()) -> RunPlan:
    """The merged settings of `run` (module docstring, `config.plan.merged_run`); an extension takes its source's
    model, data and merged method, with the new heads added and the trunk and old heads frozen; a seed replicate
    is its run with `train.seed + i`."""
    base, i = replica_of(config, run)
    if i:
        plan = run_plan(config, base, _seen)
        return replace(plan, name=run, train={**plan.train, "seed": int(plan.train.get("seed", 0)) + i})
    ext = run_entry(config, "p2", run).get("extend")
    if run in _seen:
        raise ConfigError(f"papers.p2.runs.{run}.extend: a cycle ({' -> '.join((*_seen, run))})")
    if not ext:
        return merged_run(config, "p2", run, RunPlan)
    src = run_plan(config, ext["from"], (*_seen, run))
    method = deep_merge(src.method, run_entry(config, "p2", run).get("method"))
    k_src = int(src.method.get("num_heads", 1))
    method["num_heads"] = k_src + int(ext["new_heads"])
    method.update(trunk="frozen", trunk_layers=0)  # the trunk (the source's, trained or not) and old heads freeze
    group = ext.get("group") or (src.extend["group"] if src.extend else k_src)
    plan = merged_run(config, "p2", run, RunPlan, extend={"source": "latest", **ext, "group": int(group)})
    return replace(plan, model=src.model, dataset=src.dataset, method=method)


def _method_key(config: dict, run: str, key: str, default: Any) -> Any:
    """One top-level key of a run's merged method, without merging the rest (the plan asks for K and the trunk of
    every run many times; `config.plan` deep-copies)."""
    r = declared_runs(config).get(replica_of(config, run)[0])
    if r is None:
        raise ConfigError(f"papers.p2.runs: no run {run!r}")
    r = r or {}
    if key in (r.get("method") or {}):
        return r["method"][key]
    if r.get("extend"):
        return _method_key(config, r["extend"]["from"], key, default)
    return (section(config).get("method") or {}).get(key, default)


def num_heads(config: dict, run: str) -> int:
    ext = (declared_runs(config).get(replica_of(config, run)[0]) or {}).get("extend")
    if ext:
        return num_heads(config, ext["from"]) + int(ext["new_heads"])
    return int(_method_key(config, run, "num_heads", 1))


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
    r = declared_runs(config).get(replica_of(config, run)[0]) or {}
    if r.get("extend"):
        return main_of(config, r["extend"]["from"])
    if _method_key(config, run, "trunk", "frozen") != "frozen":
        return run
    return r.get("model", section(config).get("model"))


def is_run(config: dict, main: str) -> bool:
    return replica_of(config, main)[0] in declared_runs(config)


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
    """Settings of method `p2` (`settings.launch_check`) for `run`."""
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
    """`config.plan.launcher_settings` of run `run` (a seed replicate: its run's)."""
    return run_launcher(config, "p2", replica_of(config, run)[0])


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


def pretrained_base(config: dict) -> bool:
    """Whether the section's model is a pretrained base that trained trunks are compared with (identity of greedy
    outputs, KL(base ‖ main)); not for a scratch model, whose runs train it from random weights."""
    return config["models"][section(config)["model"]]["source"] != "scratch"
