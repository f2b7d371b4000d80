"""Paper 3's tables from result JSONs (Tables 1-2, the pruning and mask-strategy ablations; its figures:
`figures`).

Every shown result is one (model, method, block complexity BC) setting of a decoding job that also ran greedy
(the job's reference, `p3_plan.experiment_settings` names both files). Per setting the tables show

* τ: tokens emitted per forward pass, the bonus token included, pooled over the prompts (all new tokens over all
  forward passes: §4's "tokens accepted and the bonus token per model call", so that model calls = N / τ; greedy
  = 1; the prompt forward counts as a pass emitting one token), ± its standard error over prompts;
* forward passes (total over prompts), tok/s (bench median), speed vs the job's own greedy run;
* identical: the fraction of prompts whose tokens equal greedy's (1.0 for a lossless decoder; the lossless
  column).

Rows are (model, method) in the configured order (Table 2 adds the mask count and the branching; Table 1 a
greedy reference row per model, mean over its jobs' greedy runs); columns are per BC.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ...results.tables import Table, pivot_pm

REFERENCE_TITLE = "Greedy (reference)"
VALUES = ("tau", "forward_passes", "tokens_per_s", "speedup", "identical")
SHOWN = {
    "tau": "τ (tokens/forward, incl. bonus)",
    "forward_passes": "forwards",
    "tokens_per_s": "tok/s",
    "speedup": "× greedy",
    "identical": "identical",
}
LONG_COLUMNS = [
    "model",
    "method",
    "title",
    "masks",
    "branching",
    "bc",
    "tau",
    "tau_se",
    "forward_passes",
    "tokens_per_s",
    "speedup",
    "identical",
    "n",
    "path",
]


def branching_label(params: Mapping[str, Any]) -> str:
    """`dynamic`, or the fixed expansion with its per-depth counts (`fixed [3, 3]`, `top1 [6, 2]`)."""
    exp = str(params.get("expansion", "dynamic"))
    br = params.get("branching")
    return exp if exp == "dynamic" or br is None else f"{exp} {list(br)}"


def p3_frame(frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per shown setting (columns `LONG_COLUMNS`), in `settings` order. `frame` is `load_results` of the
    settings' and their references' files; speed vs greedy divides by the reference's tok/s."""
    by_path = frame.set_index("path")
    rows = []
    for s in settings:
        if s["path"] not in by_path.index or s["reference"] not in by_path.index:
            missing = s["path"] if s["path"] not in by_path.index else s["reference"]
            raise ValueError(f"p3 table: no result loaded for {missing}")
        r, ref = by_path.loc[s["path"]], by_path.loc[s["reference"]]
        params = s.get("params") or {}
        rows.append(
            {
                "model": s["model"],
                "method": s["method"],
                "title": s["title"],
                "masks": int(params.get("masks_per_step", 1)),
                "branching": branching_label(params),
                "bc": int(s["bc"]),
                "tau": r["tokens_per_forward_pooled"],
                "tau_se": r["tokens_per_forward_pooled_se"],
                "forward_passes": r["forward_passes"],
                "tokens_per_s": r["tokens_per_s"],
                "speedup": _ratio(r["tokens_per_s"], ref["tokens_per_s"]),
                "identical": r["identical_fraction"],
                "n": r["n"],
                "path": s["path"],
            }
        )
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def reference_rows(frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per (model, BC) a greedy row: mean τ and tok/s over the greedy runs of the jobs shown for that model."""
    by_path = frame.set_index("path")
    rows = []
    for model in dict.fromkeys(s["model"] for s in settings):
        refs = list(dict.fromkeys(s["reference"] for s in settings if s["model"] == model))
        ref = by_path.loc[refs]
        for bc in dict.fromkeys(int(s["bc"]) for s in settings if s["model"] == model):
            rows.append(
                {
                    "model": model,
                    "method": "greedy",
                    "title": REFERENCE_TITLE,
                    "masks": 0,
                    "branching": "-",
                    "bc": bc,
                    "tau": ref["tokens_per_forward_pooled"].mean(),
                    "tau_se": math.nan,
                    "forward_passes": ref["forward_passes"].mean(),
                    "tokens_per_s": ref["tokens_per_s"].mean(),
                    "speedup": 1.0,
                    "identical": ref["identical_fraction"].mean(),
                    "n": ref["n"].iloc[0],
                    "path": refs[0],
                }
            )
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def method_table(
    frame: pd.DataFrame,
    settings: Sequence[Mapping[str, Any]],
    index: Sequence[str] = ("model", "title"),
    reference: bool = False,
) -> Table:
    """The methods x BC layout of Tables 1-2 and the pruning ablation: a row per `index` key, per BC the columns
    `BC<bc> τ (tokens/forward, incl. bonus)` (± standard error), forwards, tok/s, × greedy and identical. `reference`:
    prepend each model's greedy row (Table 1)."""
    long = p3_frame(frame, settings)
    if reference:
        long = pd.concat([reference_rows(frame, settings), long], ignore_index=True)
        long = long.iloc[_model_major(long)].reset_index(drop=True)
    long = long.assign(column=[f"BC{b}" for b in long["bc"]])
    table = pivot_pm(long, list(index), "column", list(VALUES), ["tau_se", None, None, None, None], digits=2)
    names = {}
    for c in dict.fromkeys(long["column"]):
        names |= {f"{c}/{v}": f"{c} {SHOWN[v]}" for v in VALUES} | {f"{c}/tau_se": f"{c} τ se"}
    table.digits |= {f"{c}/tokens_per_s": 1 for c in long["column"]}
    table.digits |= {f"{c}/forward_passes": 0 for c in long["column"]}
    return table.rename(names)


TABLE_INDEX = {
    "table1": ("model", "title"),
    "table2": ("model", "masks", "branching", "title"),
    "pruning": ("model", "title"),
    "strategies": ("model", "title"),
}


def p3_table(name: str, frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> Table:
    """Table `name` (table1 | table2 | pruning | strategies) of paper 3."""
    if name not in TABLE_INDEX:
        raise ValueError(f"unknown paper-3 table {name!r}; known: {sorted(TABLE_INDEX)}")
    return method_table(frame, settings, TABLE_INDEX[name], reference=name == "table1")


def _ratio(a: float, b: float) -> float:
    return a / b if b and not (isinstance(b, float) and math.isnan(b)) else math.nan


def _model_major(long: pd.DataFrame) -> list[int]:
    """Row order: models in first-appearance order, each model's rows in their current order."""
    first = {m: i for i, m in reversed(list(enumerate(long["model"])))}
    return sorted(range(len(long)), key=lambda i: first[long["model"].iloc[i]])
