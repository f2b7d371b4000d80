"""Paper 4's tables from result files (Tables 1-5; the frame of Figure 4 too, `speed_frame`; its figures:
`figures`) and the τ choice of the leaderboard.

* **Quality tables** (1, 2, 4, 5; `quality_table`): one row per (label, τ) of `plan.table_layout`, in the paper's
  layout (Table 2 in groups, Table 4 in a block per model); per column (the teacher-forced accuracy on the held-out
  split, then each task's metric) its value ± standard error; **Overall** = the mean over the `overall` columns of
  value / vanilla value (§3.2, mean of ratios; each row against the Vanilla row of its own start model), its
  standard error by the delta method with the two results taken as independent (conservative: both are measured on
  the same documents; the Vanilla row itself is exactly 100 ± 0); PLT (Eq. 7) and 1/PLT.
* **Table 3** (`speed_table`): tokens/s per batch size of greedy ("Vanilla") and `dmtd` at each τ (τ = 1 is the
  same code path as the others: the cost twin), × vanilla measured (bench protocol) and modeled from measured layer
  costs (`speed.measure_layer_costs`), PLT and 1/PLT.
* **τ choice** (`select_tau`): among the τ the speed job measured, the fastest at batch size `batch_size` whose
  teacher-forced retention (held-out split) is at least the threshold; none qualifying, the one of highest retention.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...io import atomic_write_json, read_json
from ...results.tables import PRIMARY_METRIC, Table
from ...results.write import samples_path

log = logging.getLogger(__name__)

TF_KEY = "tf_acc,none"


def metric_of(result: Mapping[str, Any], key: str | None) -> tuple[float, float, int]:
    """(value, stderr, n) of metric `key` of a result (None: `exact_match,flexible-extract` if present, else the
    first); NaN where absent."""
    metrics = result.get("metrics") or {}
    if key is None:
        key = PRIMARY_METRIC if PRIMARY_METRIC in metrics else next(iter(metrics), None)
    m = metrics.get(key) or {}
    val, err = m.get("value"), m.get("stderr")
    return (math.nan if val is None else float(val), math.nan if err is None else float(err), int(result.get("n", 0)))


def measured_plt(result_path: str | os.PathLike) -> float:
    """Mean over a result's generations of the PLT the `dmtd` decoder counted (`extra.plt_measured` in the samples
    file): Eq. 7 as run, the prefill and the stops included; NaN for other decoders (or no samples file)."""
    values = []
    path = samples_path(str(result_path))
    if not os.path.exists(path):
        return math.nan
    with open(path, encoding="utf-8") as f:
        for line in f:
            extra = json.loads(line).get("extra") or {}
            if "plt_measured" in extra:
                values.append(float(extra["plt_measured"]))
    return float(np.mean(values)) if values else math.nan


def ratio_with_stderr(a: float, sa: float, b: float, sb: float) -> tuple[float, float]:
    """a / b and its delta-method standard error with a and b independent (NaN stderr parts count as 0)."""
    if not b or math.isnan(a) or math.isnan(b):
        return math.nan, math.nan
    r = a / b
    rel = (0.0 if math.isnan(sa) or not a else (sa / a) ** 2) + (0.0 if math.isnan(sb) else (sb / b) ** 2)
    return r, abs(r) * math.sqrt(rel)


def quality_table(
    layout: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    overall: Sequence[str],
    metrics: Mapping[str, str | None],
    titles: Mapping[str, str] | None = None,
    offsets: int = 0,
) -> Table:
    """A quality table (module docstring) from `plan.table_layout` rows; `metrics[column]` the metric key of each
    column (the teacher-forced column's is `tf_acc,none`), `titles` the columns' shown names; `offsets` > 0 adds
    the teacher-forced accuracy by cycle offset j < `offsets` (`TF acc@j`: j = 0 full depth, j >= 1 late-only)."""
    titles = dict(titles or {})
    out, pm, digits = [], {}, {}
    for row in layout:
        rec: dict[str, Any] = {
            "block": row["block"] or "",
            "row": row["title"],
            "label": row["label"],
            "tau": row["tau"],
        }
        first = read_json(row["files"][columns[0]])  # the teacher-forced result where there are offsets
        for j in range(offsets):
            rec[f"TF acc@{j}"] = metric_of(first, f"tf_acc@{j},none")[0] if row["tau"] else math.nan
        ratios = []
        for col in columns:
            res, van = read_json(row["files"][col]), read_json(row["vanilla"][col])
            v, se, n = metric_of(res, metrics.get(col))
            v0, se0, _ = metric_of(van, metrics.get(col))
            name = titles.get(col, col)
            rec |= {name: v, f"{name} ± ": se, f"{name} n": n}
            pm[name], digits[name] = f"{name} ± ", 3
            if col in overall:  # a result against itself (the Vanilla row) is exactly 1
                same = row["files"][col] == row["vanilla"][col]
                ratios.append((1.0, 0.0) if same and not math.isnan(v) else ratio_with_stderr(v, se, v0, se0))
        mean = float(np.mean([r for r, _ in ratios])) if ratios else math.nan
        err = math.sqrt(sum(e**2 for _, e in ratios if not math.isnan(e))) / len(ratios) if ratios else math.nan
        settings = first.get("settings") or {}
        p = 1.0 if row["tau"] == 0 else float(settings.get("plt", math.nan))
        generated = [row["files"][c] for c in columns[1:]]
        run_plt = 1.0 if row["tau"] == 0 else measured_plt(generated[0]) if generated else math.nan
        rec |= {"Overall (%)": 100 * mean, "Overall ± ": 100 * err, "PLT": p, "1/PLT": 1 / p if p else math.nan}
        rec["PLT (measured)"] = run_plt
        out.append(rec)
    pm["Overall (%)"] = "Overall ± "
    digits |= {"Overall (%)": 1, "PLT": 3, "1/PLT": 2, "PLT (measured)": 3}
    frame = pd.DataFrame(out)
    if not frame["block"].astype(bool).any():
        frame = frame.drop(columns="block")
    return Table(frame, pm, digits)


def speed_frame(results: Mapping[tuple[int, str], str], layer_costs: Mapping[int, str]) -> pd.DataFrame:
    """One row per (batch size, setting) of the speed job: tok/s, × vanilla (measured and modeled), PLT."""
    rows = []
    for (batch, setting), path in results.items():
        r = read_json(path)
        params = (r.get("decoder") or {}).get("params") or {}
        tau = params.get("tau") if r["decoder"]["name"] == "dmtd" else None
        costs = read_json(layer_costs[batch]) if batch in layer_costs else {}
        modeled = (costs.get("modeled_speedup") or {}).get(str(tau), math.nan) if tau else 1.0
        p = (costs.get("plt") or {}).get(str(tau), math.nan) if tau else 1.0
        stats = r.get("decode_stats") or {}
        rows.append(
            {
                "batch": int(batch),
                "setting": setting,
                "tau": tau,
                "tokens_per_s": stats.get("tokens_per_s"),
                "speedup": stats.get("speedup_vs_greedy"),
                "modeled": modeled,
                "plt": p,
                "plt_measured": measured_plt(path) if tau else 1.0,
                "threads": (r.get("settings") or {}).get("threads"),
                "load": (r.get("settings") or {}).get("load_1min"),
                "n": r.get("n"),
            }
        )
    return pd.DataFrame(rows)


def speed_table(frame: pd.DataFrame) -> Table:
    """Table 3: rows Vanilla and DMTD τ; per batch size tok/s and × vanilla (measured, modeled); PLT, 1/PLT."""
    out = []
    for _, g in frame.groupby("setting", sort=False):
        tau = g["tau"].iloc[0]
        rec: dict[str, Any] = {"row": "Vanilla" if pd.isna(tau) else f"MTD{int(tau)}" + (" (twin)" if tau == 1 else "")}
        for r in g.sort_values("batch").to_dict("records"):
            b = r["batch"]
            rec |= {
                f"Batch={b} tok/s": r["tokens_per_s"],
                f"Batch={b} ×": r["speedup"],
                f"Batch={b} × modeled": r["modeled"],
            }
        rec |= {"PLT": g["plt"].iloc[0], "1/PLT": 1 / g["plt"].iloc[0], "PLT (measured)": g["plt_measured"].iloc[0]}
        out.append(rec)
    data = pd.DataFrame(out)
    digits = {c: (2 if "tok/s" in c else 3) for c in data.columns if c != "row"} | {"PLT": 3, "1/PLT": 2}
    return Table(data, {}, digits)


def warmup_of(summary: str | os.PathLike) -> int:
    """The warm-up steps a training ran (its `train_summary.json`: the TrainConfig as run, an epoch-based length
    and a warm-up ratio resolved)."""
    return int(read_json(summary)["config"]["warmup_steps"])


def select_tau(vanilla_tf: str, tf: Mapping[int, str], speed: Mapping[int, str], threshold: float) -> dict[str, Any]:
    """The leaderboard's τ (module docstring) from the teacher-forced results (`tf`: τ -> file, `vanilla_tf`) and
    the speed job's results at one batch size (`speed`: τ -> file)."""
    v0, se0, _ = metric_of(read_json(vanilla_tf), TF_KEY)
    cands = []
    for tau in sorted(set(tf) & set(speed)):
        v, se, n = metric_of(read_json(tf[tau]), TF_KEY)
        r, rse = ratio_with_stderr(v, se, v0, se0)
        tps = (read_json(speed[tau]).get("decode_stats") or {}).get("tokens_per_s")
        cands.append({"tau": tau, "retention": r, "retention_stderr": rse, "tokens_per_s": tps, "n": n})
    if not cands:
        raise ValueError("select_tau: no τ has both a teacher-forced and a speed result")
    ok = [c for c in cands if c["retention"] >= threshold]
    chosen = max(ok, key=lambda c: c["tokens_per_s"]) if ok else max(cands, key=lambda c: c["retention"])
    return {
        "params": {"tau": int(chosen["tau"])},
        "rule": f"fastest τ with teacher-forced retention >= {threshold:g} (held-out split); "
        + ("met" if ok else "none met: the τ of highest retention"),
        "threshold": threshold,
        "candidates": cands,
    }


def choose_tau(vanilla_tf: str, tf: Mapping[int, str], speed: Mapping[int, str], threshold: float, out: str) -> dict:
    """Write the leaderboard's τ choice (`report.select_tau`) to `out`."""
    chosen = select_tau(vanilla_tf, tf, speed, threshold)
    atomic_write_json(out, chosen)
    log.info("selected τ %s (%s)", chosen["params"]["tau"], chosen["rule"])
    return chosen
