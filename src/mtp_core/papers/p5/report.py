"""Paper 5's tables from the result files (§6 Table 1, App. B Table 2; Figs. 1-5: `figures`).

* **Table 1**: per task and method: tok/s (bench protocol: tokens over the sum of per-prompt median seconds,
  prefill included; the paper averages per-prompt tok/s), "× vanilla" = its tok/s over the task's vanilla row's
  (`P5Plan.vanilla_method`: greedy, or at paper scale the sampling vanilla as the paper's), speedup over greedy
  measured in the same job ("× greedy") and modeled (the tree core's cost table on the job's first prompt:
  verification only, drafting not priced), τ = mean accept length per step (bonus excluded, the paper's; mean ±
  stderr over prompts), tokens per step (bonus included, Spec-Bench's), tokens per forward (prefill counted, pooled
  over prompts: paper 3's), drafted nodes per step, the share of steps on the largest tree used (EntMTPτ's
  aggressive tree), identical-to-greedy fraction, the continuation NLL under the base model (nats per token, mean
  ± stderr over prompts; `quality`) and its difference from the vanilla row's, paired by prompt (§5.1's "within
  [x] nats" of the base LM), whether the simulation predicted every prompt's forwards (empty under typical
  acceptance, where it does not apply), and n.
* **Table 2**: per task, frontier trees near the requested sizes with their search cap D, biased (the what-if
  probe at the smaller tree's step starts) and self (own rollout) mean accept, and per task max |Δ| and
  Kendall's tau over every re-scored tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...io import read_json, read_jsonl
from ...results.read import pooled_tokens_per_forward
from ...results.tables import Table
from ...results.write import mean_stderr, samples_path


def _paired(a: Sequence[float | None] | None, b: Sequence[float | None] | None) -> list[float]:
    """Per prompt, a - b where both are known (none without both lists)."""
    if a is None or b is None:
        return []
    return [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None]


def table1(rows: Sequence[Mapping[str, Any]], checks: Mapping[str, str]) -> Table:
    """`rows`: `P5Plan.table1_rows`; `checks`: task -> its decoding job's simulation check file."""
    out = []
    for r in rows:
        res = read_json(r["path"])
        stats = res["decode_stats"]
        samples = list(read_jsonl(samples_path(r["path"])))
        tau = [float(np.mean(np.array(s["accepted"][1:]) - 1)) if len(s["accepted"]) > 1 else 0.0 for s in samples]
        per_step = [float(np.mean(s["accepted"][1:])) if len(s["accepted"]) > 1 else 1.0 for s in samples]
        drafted = [d for s in samples for d in (s.get("extra", {}).get("drafted") or [])[1:]]
        largest = max(drafted) if drafted else None
        check = read_json(checks[r["task"]]) if Path(checks[r["task"]]).is_file() else {"methods": {}}
        sim = check["methods"].get(r["method"])
        m_tau, e_tau = mean_stderr(tau)
        m_step, e_step = mean_stderr(per_step)
        van = read_json(r["vanilla"])["decode_stats"] if r.get("vanilla") else {}
        vanilla, tps = van.get("tokens_per_s"), stats.get("tokens_per_s")
        nll = stats.get("continuation_nll") or {}
        d_nll, e_d_nll = mean_stderr(
            _paired(nll.get("per_sample"), (van.get("continuation_nll") or {}).get("per_sample"))
        )
        out.append(
            {
                "task": r["task_title"],
                "method": r["title"],
                "tok/s": tps,
                "× vanilla": tps / vanilla if tps is not None and vanilla else None,
                "× greedy": stats.get("speedup_vs_greedy"),
                "modeled × greedy": stats.get("modeled_speedup_vs_greedy"),
                "τ (bonus excl.)": m_tau,
                "τ stderr": e_tau,
                "tokens/step": m_step,
                "tokens/step stderr": e_step,
                "tokens/forward": pooled_tokens_per_forward(stats),
                "drafted nodes/step": float(np.mean(drafted)) if drafted else 0.0,
                "largest-tree share": float(np.mean([d == largest for d in drafted])) if drafted else None,
                "identical": stats.get("identical_fraction"),
                "continuation NLL": nll.get("mean"),
                "continuation NLL stderr": nll.get("stderr"),
                "Δ NLL vs vanilla": d_nll,
                "Δ NLL stderr": e_d_nll,
                "simulated = actual": None if sim is None or sim["equal"] is None else bool(sim["equal"]),
                "n": res["n"],
            }
        )
    data = pd.DataFrame(out)
    return Table(
        data,
        pm={
            "τ (bonus excl.)": "τ stderr",
            "tokens/step": "tokens/step stderr",
            "continuation NLL": "continuation NLL stderr",
            "Δ NLL vs vanilla": "Δ NLL stderr",
        },
        digits={
            "tok/s": 2,
            "× vanilla": 3,
            "× greedy": 3,
            "modeled × greedy": 3,
            "continuation NLL": 3,
            "Δ NLL vs vanilla": 3,
            "n": 0,
        },
    )


def table2(paths: Mapping[str, tuple[str, str]], titles: Mapping[str, str], nodes: Sequence[int]) -> Table:
    """`paths`: task -> (search.json, self.json)."""
    out = []
    for task, (_, self_path) in paths.items():
        data = read_json(self_path)
        rows = sorted((r for r in data["rows"] if r["biased"] is not None), key=lambda r: r["n_nodes"])
        picked: list[dict] = []
        for n in nodes:
            below = [r for r in rows if r["n_nodes"] <= n]
            if below and below[-1] not in picked:
                picked.append(below[-1])
        for r in picked:
            out.append(
                {
                    "task": titles[task],
                    "n": r["n_nodes"],
                    "D": r["depth"],
                    "biased": r["biased"],
                    "self": r["self"],
                    "Δ (self - biased)": r["self"] - r["biased"],
                    "max |Δ| (all frontier trees)": data.get("max_abs_delta"),
                    "Kendall τ (all)": data.get("kendall_tau"),
                    "frontier trees": data.get("n_trees"),
                }
            )
    return Table(pd.DataFrame(out), digits={"n": 0, "D": 0, "frontier trees": 0})
