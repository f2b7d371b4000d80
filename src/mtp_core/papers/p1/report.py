"""Paper 1's tables from result JSONs (Tables 1-5) and the frame its figures read too (`p1_frame`; the figures:
`figures`).

Every result of paper 1 is one (run label, task, decoder setting). `p1_frame` classifies them:

* **baseline**: greedy decoding of the base model (run label `<model>@step0`), the tables' "Baseline Step 0,
  k=1" row, shown at the top of every block whose run starts from that model;
* **static**: `static-k` with parameter k ("Static k=3");
* **conf**: `conf-adapt` with parameter tau ("ConfAdapt (τ = 0.9)").

Rows of a block follow the paper: baseline, Static k ascending, ConfAdapt τ descending. The value of a task is
its metric (`exact_match,flexible-extract` unless the table names another), shown in percent for rates
(accuracies) and as is for scores such as ROUGE-L (the paper's CNN/DailyMail column), ± lm-eval's standard
error; effective k (the paper's acceleration factor, mean over samples of the per-sample mean of accepted
tokens per step inside the stop-truncated answer) ± its standard deviation across samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ...results.tables import PRIMARY_METRIC, Table

BASELINE_LABEL = "Baseline Step 0, k=1"
STEP_SEP = "@step"
SCORE_PREFIXES = ("rouge", "bleu", "chrf", "ter", "bertscore", "meteor")
KIND_ORDER = {"baseline": 0, "static": 1, "conf": 2}
LONG_COLUMNS = [
    "path",
    "label",
    "run",
    "step",
    "model",
    "task",
    "kind",
    "k",
    "tau",
    "setting",
    "order",
    "metric",
    "percent",
    "value",
    "stderr",
    "effective_k",
    "effective_k_std",
    "n",
    "chat_template",
]


def classify(decoder: str, params: Mapping[str, Any]) -> tuple[str, int | None, float | None]:
    """(kind, k, tau) of a decoder setting: static-k -> static, conf-adapt -> conf, anything else (greedy) ->
    baseline with k = 1."""
    if decoder == "static-k":
        return "static", int(params["k"]), None
    if decoder == "conf-adapt":
        return "conf", None, float(params["tau"])
    return "baseline", 1, None


def setting_label(kind: str, k: int | None, tau: float | None) -> str:
    if kind == "static":
        return f"Static k={int(k)}"
    if kind == "conf":
        return f"ConfAdapt (τ = {tau:g})"
    return BASELINE_LABEL


def short_label(kind: str, k: int | None, tau: float | None) -> str:
    return f"k={int(k)}" if kind == "static" else f"τ={tau:g}" if kind == "conf" else "step 0"


def is_percent(metric_key: str) -> bool:
    """Rates (accuracies, exact match) show in percent; scores such as ROUGE-L as they are."""
    return not metric_key.split(",", 1)[0].lower().startswith(SCORE_PREFIXES)


def parse_run_label(label: str) -> tuple[str, int | None]:
    name, sep, step = str(label).partition(STEP_SEP)
    return (name, int(step)) if sep and step.isdigit() else (str(label), None)


def p1_frame(frame: pd.DataFrame, metrics: Mapping[str, str | None] | None = None) -> pd.DataFrame:
    """One row per result (columns `LONG_COLUMNS`): its kind and setting, the task's chosen metric (percent for
    rates) ± stderr, effective k ± std. `metrics` maps a task to its metric key (None/absent: the primary
    metric rule of the foundation's evaluation table)."""
    metrics = dict(metrics or {})
    rows = []
    for rec in frame.to_dict("records"):
        kind, k, tau = classify(rec["decoder"], rec["params"])
        keys = list(rec["metrics"])
        key = metrics.get(rec["task"]) or (PRIMARY_METRIC if PRIMARY_METRIC in keys else (keys[0] if keys else None))
        if key is not None and key not in rec["metrics"]:
            raise ValueError(f"{rec['path']}: task {rec['task']!r} has no metric {key!r} (has: {', '.join(keys)})")
        m = (rec["metrics"].get(key) or {}) if key else {}
        pct = is_percent(key) if key else True
        scale = 100.0 if pct else 1.0
        value = _num(m.get("value")) * scale
        stderr = _num(m.get("stderr")) * scale
        run, step = parse_run_label(rec["run"])
        ek, eks = rec["effective_k"], rec["effective_k_std"]  # NaN (no answer to count over) shows as missing
        rows.append(
            {
                "path": rec["path"],
                "label": rec["run"],
                "run": run,
                "step": step,
                "model": rec["model"],
                "task": rec["task"],
                "kind": kind,
                "k": k,
                "tau": tau,
                "setting": setting_label(kind, k, tau),
                "order": (KIND_ORDER[kind], k or 0, -(tau or 0.0)),
                "metric": key,
                "percent": pct,
                "value": value,
                "stderr": stderr,
                "effective_k": ek,
                "effective_k_std": eks,
                "n": rec["n"],
                "chat_template": (rec.get("settings") or {}).get("apply_chat_template"),
            }
        )
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


# ---------------------------------------------------------------------------------------------------- tables


@dataclass
class P1Table(Table):
    """A Table whose markdown shows only `md_columns` (all when empty), with each block's label only on the
    block's first row (the paper's merged cell); the CSV keeps every column on every row."""

    md_columns: list[str] = field(default_factory=list)
    block_column: str = "block"

    def display(self) -> pd.DataFrame:
        shown = super().display()
        if self.md_columns:
            shown = shown[[c for c in self.md_columns if c in shown.columns]]
        if self.block_column in shown:
            col = shown[self.block_column].tolist()
            shown[self.block_column] = [v if i == 0 or v != col[i - 1] else "" for i, v in enumerate(col)]
        return shown


def value_header(task: str, percent: bool, metric: str | None) -> str:
    return f"{task} Acc. (%)" if percent else f"{task} {str(metric).split(',', 1)[0]}"


def p1_table(
    frame: pd.DataFrame,
    runs: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    metrics: Mapping[str, str | None] | None = None,
    titles: Mapping[str, str] | None = None,
) -> P1Table:
    """Tables 1-5: one block per trained run (`runs` order; default order of appearance), rows baseline step 0
    (the results of the run's base model), Static k ascending, ConfAdapt τ descending; per task (`tasks`
    order) the value ± stderr and effective k ± std. Checkpoint results (`<run>@step<N>`) are ignored.
    A run of `runs` without results, or a block without its baseline, raises ValueError."""
    long = p1_frame(frame, metrics)
    long = long[long["step"].isna() | (long["kind"] == "baseline")]
    trained = long[long["kind"] != "baseline"]
    base = long[long["kind"] == "baseline"]
    runs = list(runs) if runs else list(dict.fromkeys(trained["run"]))
    tasks = list(tasks) if tasks else list(dict.fromkeys(long["task"]))
    titles = dict(titles or {})
    headers = {}
    for t in tasks:
        sub = long[long["task"] == t]
        pct = bool(sub["percent"].iloc[0]) if len(sub) else True
        headers[t] = (value_header(t, pct, sub["metric"].iloc[0] if len(sub) else None), pct)
    out_rows = []
    for run in runs:
        sub = trained[trained["run"] == run]
        if sub.empty:
            raise ValueError(f"p1 table: no results for run {run!r}")
        model = sub["model"].iloc[0]
        chat = sub["chat_template"].dropna()
        chat_s = "" if chat.empty else f" · Chat Template: {'On' if bool(chat.iloc[0]) else 'Off'}"
        block = f"{titles.get(run, run)} ({model}){chat_s}"
        b = base[base["model"] == model]
        if b.empty:
            raise ValueError(f"p1 table: no step-0 baseline of model {model!r} (run {run!r})")
        settings = pd.concat([b, sub]).drop_duplicates("setting").sort_values("order", kind="stable")
        for s in settings.to_dict("records"):
            row = {
                "block": block,
                "run": run,
                "model": model,
                "setting": s["setting"],
                "kind": s["kind"],
                "k": s["k"],
                "tau": s["tau"],
            }
            src = b if s["kind"] == "baseline" else sub
            for t in tasks:
                cell = src[(src["task"] == t) & (src["setting"] == s["setting"])]
                if len(cell) > 1:
                    raise ValueError(
                        f"p1 table: several results for {run!r} {t!r} {s['setting']!r}: {', '.join(cell['path'])}"
                    )
                c = cell.iloc[0] if len(cell) else None
                h = headers[t][0]
                row[h] = c["value"] if c is not None else math.nan
                row[f"{h} stderr"] = c["stderr"] if c is not None else math.nan
                row[f"{t} Eff. k"] = c["effective_k"] if c is not None else math.nan
                row[f"{t} Eff. k std"] = c["effective_k_std"] if c is not None else math.nan
                row[f"{t} n"] = c["n"] if c is not None else pd.NA
            out_rows.append(row)
    data = pd.DataFrame(out_rows)
    data = data.astype({"k": "Int64", **{f"{t} n": "Int64" for t in tasks}})
    pm, digits = {}, {}
    for t in tasks:
        h, pct = headers[t]
        pm[h] = f"{h} stderr"
        pm[f"{t} Eff. k"] = f"{t} Eff. k std"
        digits[h] = 1 if pct else 3
        digits[f"{t} Eff. k"] = 2
    digits["tau"] = 3
    shown = [
        "block",
        "setting",
        *[c for t in tasks for c in (headers[t][0], f"{headers[t][0]} stderr", f"{t} Eff. k", f"{t} Eff. k std")],
    ]
    hidden = [c for c in data.columns if c not in shown]
    md = ["block", "setting", *[c for t in tasks for c in (headers[t][0], f"{t} Eff. k")]]
    return P1Table(data[shown + hidden], pm, digits, default_digits=2, md_columns=md)


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


__all__ = [
    "BASELINE_LABEL",
    "P1Table",
    "classify",
    "is_percent",
    "p1_frame",
    "p1_table",
    "setting_label",
]
