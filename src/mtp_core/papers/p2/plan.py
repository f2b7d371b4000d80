"""Paper 2's experiment plan (`P2Plan`): the validated `papers.p2` section (`settings.P2Settings`) turned into trainings,
jobs, result files, tables and figures. One place, used by the workflow (`workflow/rules/p2.smk`), the scripts and
the tests.

Names (derived here only):

* **Runs.** `papers.p2.runs.<name>` overrides the shared `model`, `dataset`, `method` (P2Config keys) and `train`
  (TrainConfig keys), merged key by key. `extend: {from, new_heads, group, source}` makes a looped-extension run
  (§3.3): the source run's heads plus `new_heads` copies of a group of heads, trained on the source's trunk (its
  base model, or the trunk it trained), frozen with the old heads, with the source's merged method (the run's own
  `method` keys override it; `trunk` is always frozen). `group` defaults to the last stage's group: all K heads of
  a trained run, or the group the source extension itself copied, so that with `source: latest` each stage copies
  the group the previous stage trained (4 -> 8 -> 12: heads 9-12 <- 5-8, not the first stage's 1-4).
* **Seeds.** A run with `seeds: n` trains n times: as itself (`train.seed`) and as replicates `<run>-seed<i>`
  (i = 1 .. n-1, `train.seed + i`), full runs in every other respect (training, acceptance, validation), which
  Tables 1 and 7 read for the spread of each number over seeds. With a frozen trunk and its feature cache the
  windows are the same for every seed: the seed moves the heads' initialisation (and nothing of the trunk).
* **Mains.** The trunk a run decodes with: its base model (a frozen trunk) or the run itself (a trained trunk,
  `results/models/p2/<run>/model`). Run names may not equal model names, so the two never collide.
* **Settings** `h<D>`: decoding with D drafts, for every D of `depths` (each run's K and the `loops`), on every
  run (D < K: its first D heads; D > K: training-free looped extension, depth d drafting with head
  ((d-1) mod K)+1), so that the acceptance rule has the same outputs for every run.
Tables, figures and the speed experiments: `experiments` (`Experiments`); the checks: `checks` (`Checks`).

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

from ...config import layout
from ...config.plan import RunPlan as CoreRunPlan
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError, deep_merge, model_spec
from ...models.plan import model_dir, model_inputs
from ...train.finetune import with_base_stamp
from .checks import Checks
from .experiments import FIGURES, REFERENCE, TABLES, Experiments, setting_label
from .settings import P2Settings, Run

REPLICATE = re.compile(r"(.+)-seed([1-9][0-9]*)")  # `<run>-seed<i>`: seed replicate i of a declared run


@dataclass(frozen=True)
class RunPlan(CoreRunPlan):
    """One training (`config.plan.RunPlan`; `method`: P2Config keys) and its looped extension."""

    extend: dict | None = None  # {from, new_heads, group, source}

    @property
    def trunk_trained(self) -> bool:
        return self.method["trunk"] != "frozen"


def shards_index(dataset: str) -> str:
    return f"{layout.data_dir(dataset)}/shards/index.json"


class P2Plan(Experiments, Checks):
    """Paper 2's plan over a validated config (module docstring)."""

    paper = "p2"
    Settings = P2Settings
    TABLES = TABLES
    FIGURES = FIGURES
    TRAIN_METHOD = "p2"  # a run's export (`final_model`): its heads, and its trunk when the trunk trained

    # ------------------------------------------------------------------------------------------------------ runs

    def seed_count(self, run: str) -> int:
        """How many trainings a declared run has (`seeds`; absent: one)."""
        r = self.s.runs.get(run)
        return (r and r.seeds) or 1

    def replicates(self, run: str) -> list[str]:
        """The seed replicates of a declared run (module docstring), without the run itself."""
        return [f"{run}-seed{i}" for i in range(1, self.seed_count(run))]

    def replica_of(self, run: str) -> tuple[str, int]:
        """(the declared run, the seed index) of a run name: a declared run is its own replicate 0; an unknown name
        comes back as it is (whoever looks it up names it)."""
        m = None if run in self.s.runs else REPLICATE.fullmatch(run)
        if m and m[1] in self.s.runs and int(m[2]) < self.seed_count(m[1]):
            return m[1], int(m[2])
        return run, 0

    def declared(self, run: str) -> Run:
        """The declared run of `run` (a seed replicate: its run's); ConfigError for another name."""
        r = self.s.runs.get(self.replica_of(run)[0])
        if r is None:
            raise ConfigError(f"papers.p2.runs: no run {run!r} (runs: {', '.join(self.s.runs)})")
        return r

    def run_names(self) -> list[str]:
        """Every training: the declared runs, each followed by its seed replicates."""
        return [r for run in self.s.runs for r in (run, *self.replicates(run))]

    def run(self, name: str, _seen: tuple[str, ...] = ()) -> RunPlan:  # type: ignore[override]
        """The merged settings of run `name` (module docstring, `PaperPlan.run`); an extension takes its source's
        model, data and merged method, with the new heads added and the trunk and old heads frozen; a seed replicate
        is its run with `train.seed + i`."""
        base, i = self.replica_of(name)
        if i:
            plan = self.run(base, _seen)
            return replace(plan, name=name, train={**plan.train, "seed": int(plan.train["seed"]) + i})
        r = self.declared(name)
        if name in _seen:
            raise ConfigError(f"papers.p2.runs.{name}.extend: a cycle ({' -> '.join((*_seen, name))})")
        if not r.extend:
            return super().run(name, RunPlan)
        src = self.run(r.extend["from"], (*_seen, name))
        method = deep_merge(src.method, r.method)
        k_src = int(src.method["num_heads"])
        method["num_heads"] = k_src + int(r.extend["new_heads"])
        method.update(trunk="frozen", trunk_layers=0)  # the trunk (the source's, trained or not) and old heads freeze
        group = r.extend.get("group") or (src.extend["group"] if src.extend else k_src)
        plan = super().run(name, RunPlan, extend={**r.extend, "group": int(group)})
        return replace(plan, model=src.model, dataset=src.dataset, method=method)

    def _method_key(self, run: str, key: str) -> Any:
        """One top-level key of a run's merged method, without merging the rest (the plan asks for K and the trunk of
        every run many times; `config.plan` deep-copies)."""
        r = self.declared(run)
        if key in (r.method or {}):
            return r.method[key]
        return self._method_key(r.extend["from"], key) if r.extend else self.s.method[key]

    def num_heads(self, run: str) -> int:
        ext = self.declared(run).extend
        return self.num_heads(ext["from"]) + int(ext["new_heads"]) if ext else int(self._method_key(run, "num_heads"))

    def main_of(self, run: str) -> str:
        """The trunk run decodes with: its base model (frozen trunk) or the run (a trained trunk, as its source's
        for an extension)."""
        r = self.declared(run)
        if r.extend:
            return self.main_of(r.extend["from"])
        return run if self._method_key(run, "trunk") != "frozen" else r.model or self.s.model

    def is_run(self, main: str) -> bool:
        return self.replica_of(main)[0] in self.s.runs

    def heads_path(self, run: str) -> str:
        """The directory a decoder reads the heads of `run` from (`train.heads_dir`)."""
        return f"{self.final_model(run)}/heads" if self.run(run).trunk_trained else self.final_model(run)

    def trunk_input(self, main: str) -> list[str]:
        """What loading main `main` reads: a base model's checkpoint, or the run's export holding its trained trunk."""
        return [self.final_model(main)] if self.is_run(main) else model_inputs(self.config, main)

    def base_of(self, run: str) -> str | None:
        """The untrained trunk of a run that trained its trunk (its KL(base ‖ main)), else None."""
        trained = self.is_run(self.main_of(run))
        return self.run(run).model if trained and self.pretrained_base() else None

    def pretrained_base(self) -> bool:
        """Whether the section's model is a pretrained base that trained trunks are compared with (identity of greedy
        outputs, KL(base ‖ main)); not for a scratch model, whose runs train it from random weights."""
        return self.config["models"][self.s.model]["source"] != "scratch"

    # -------------------------------------------------------------------------------------------------- features

    def feature_key(self, run: str) -> str | None:
        """The feature cache a run reads (None: it runs its trunk). Runs of one key read the same rows."""
        plan = self.run(run)
        m = plan.method
        if plan.extend:
            return None  # a continued pre-training stage: the source's trunk, run live (its windows differ in count)
        if not m["feature_cache"] or m["trunk"] == "all":
            return None
        return f"{plan.model}-{plan.dataset}-s{m['seq_len']}-w{m['window_seed']}-t{int(m['trunk_layers'])}"

    def feature_dir(self, key: str) -> str:
        return f"{self.run_dir('features')}/{key}"

    def feature_keys(self) -> dict[str, dict[str, Any]]:
        """Key -> {model, dataset, seq_len, val_tokens, window_seed, trunk_layers, rows (the most any run of it
        reads)}."""
        out: dict[str, dict[str, Any]] = {}
        for run in self.run_names():
            key = self.feature_key(run)
            if key is None:
                continue
            plan = self.run(run)
            m, t = plan.method, plan.train
            keys = ("seq_len", "val_tokens", "window_seed", "trunk_layers")
            entry = out.setdefault(
                key, {"model": plan.model, "dataset": plan.dataset, **{k: int(m[k]) for k in keys}, "rows": 0}
            )
            entry["rows"] = max(entry["rows"], int(t["max_steps"]) * int(t["global_batch_size"]))
        return out

    def feature_inputs(self, key: str) -> dict[str, Any]:
        f = self.feature_keys()[key]
        return {"model": model_inputs(self.config, f["model"]), "shards": shards_index(f["dataset"])}

    # ------------------------------------------------------------------------------------------------- trainings

    def run_settings(self, run: str) -> dict:
        """Settings of method `p2` (`settings.launch_check`) for `run`."""
        plan, key = self.run(run), self.feature_key(run)
        extend = None
        if plan.extend:
            e = plan.extend
            extend = {"heads": self.final_model(e["from"]), "new_heads": int(e["new_heads"]), "group": e["group"]}
            extend["source"] = e["source"]
        main = self.main_of(run)
        return with_base_stamp(
            {
                "model": model_spec(self.config, plan.model),
                "base_dir": model_dir(self.config, plan.model),
                "trunk_dir": self.final_model(main) if plan.extend and self.is_run(main) else None,
                "shards": shards_index(plan.dataset),
                "features": self.feature_dir(key) if key else None,
                "extend": extend,
                "train": plan.train,
                "p2": plan.method,
            },
            self.config,
            plan.model,
        )

    def train_inputs(self, run: str) -> dict[str, Any]:
        plan, key = self.run(run), self.feature_key(run)
        inputs: dict[str, Any] = {"model": model_inputs(self.config, plan.model), "shards": shards_index(plan.dataset)}
        if key:
            inputs["features"] = self.feature_dir(key)
        if plan.extend:
            inputs["source"] = self.final_model(plan.extend["from"])
            inputs["trunk"] = self.trunk_input(self.main_of(run))
        return inputs

    def launcher_settings(self, run: str, table: str = "runs") -> dict:
        """`PaperPlan.launcher_settings` of run `run` (a seed replicate: its run's)."""
        return super().launcher_settings(self.replica_of(run)[0], table)

    # ------------------------------------------------------------------------------------ settings and files

    def depths(self) -> list[int]:
        """The draft counts D every acceptance job simulates: each run's K and every loop depth."""
        return sorted({self.num_heads(r) for r in self.run_names()} | {int(d) for d in self.s.loops})

    def result(self, run: str, prompt_set: str, setting: str) -> str:
        """A result on a prompt set: a main's reference (`greedy`), a run's acceptance at a setting."""
        return self.result_path(run, layout.prompts_task(prompt_set), setting)

    def reference_path(self, main: str, prompt_set: str) -> str:
        return self.result(main, prompt_set, REFERENCE)

    def topn_path(self, main: str, ext: str = "json") -> str:
        return f"{self.analysis_dir(main)}/topn_mass.{ext}"

    def validation_path(self, run: str) -> str:
        return f"{self.analysis_dir(run)}/val.json"

    def acceptance_outputs(self, run: str) -> list[str]:
        return [self.result(run, ps, setting_label(d)) for ps in self.s.prompt_sets for d in self.depths()]

    def run_results(self, run: str) -> list[str]:
        """Every file of run `run` the tables and figures read (its named target `p2_<run>`)."""
        return self.acceptance_outputs(run) + [self.validation_path(run)]

    def windows_spec(self, main: str) -> dict[str, Any]:
        """The windows a main's validation metrics and Top-N mass read: its run's (a trained trunk) or the section's
        data and method (a base model), and the section's `validation_dataset` (None: the stream's held-out tail)."""
        if self.is_run(main):
            plan = self.run(main)
            dataset, m = plan.dataset, plan.method
        else:
            dataset, m = self.s.dataset, self.s.method
        validation = self.s.validation_dataset
        return {
            "shards": shards_index(dataset),
            "validation": shards_index(validation) if validation else None,
            **{k: int(m[k]) for k in ("seq_len", "val_tokens", "window_seed")},
            "windows": self.s.validation_windows,
        }

    def _windows_inputs(self, main: str) -> dict[str, str]:
        """The shards a main's validation windows read (`data.validation_rows`)."""
        spec = self.windows_spec(main)
        return {k: spec[k] for k in ("shards", "validation") if spec[k]}

    def reference_inputs(self, main: str) -> dict[str, Any]:
        return {
            "model": self.trunk_input(main),
            "prompts": [layout.prompts(ps) for ps in self.s.prompt_sets],
            **self._windows_inputs(main),
        }

    def acceptance_inputs(self, run: str) -> dict[str, Any]:
        main, base = self.main_of(run), self.base_of(run)
        inputs = {
            "run": self.final_model(run),
            "main": self.trunk_input(main),
            "references": [self.reference_path(main, ps) for ps in self.s.prompt_sets],
            **self._windows_inputs(main),
        }
        return inputs | ({"base": model_inputs(self.config, base)} if base else {})

    def leaderboard(self) -> list[LeaderboardEntry]:
        """Paper 2's rows (`papers.p2.leaderboard.rows`: {run, depth}): `mtp-spec` with the run's heads at D drafts
        (D > K: the training-free loop) on the leaderboard model, or on the run's trained trunk."""
        rows = []
        for r in self.s.leaderboard.rows:
            plan, k, main = self.run(r.run), self.num_heads(r.run), self.main_of(r.run)
            depth = int(r.depth or k)
            loop = f", loop to {depth}" if depth > k else ""
            rows.append(
                LeaderboardEntry(
                    "p2",
                    f"p2-{r.run}-{setting_label(depth)}",
                    f"P2 {plan.title} K={k}{loop}",
                    {"decoder": "mtp-spec", "heads": self.heads_path(r.run), "num_drafts": depth},
                    checkpoint=self.final_model(main) if self.is_run(main) else None,
                    model=plan.model,
                    needs=(self.final_model(r.run),),
                )
            )
        return rows
