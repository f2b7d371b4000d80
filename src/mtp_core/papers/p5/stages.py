"""Paper 5's frontier pipeline for one task and one set of heads, as the frontier job and `mtp-repro tree-search`
run it: calibration (greedy continuations of the calibration prompts and their table) -> Algorithm 1 per depth
cap -> debiasing -> prices and the throughput frontier (EntMTP*) -> the scheduler's bank, its τ sweep and its
ladder sweep -> the regime analysis (App. A). Every acceptance number comes from one engine (`engines`): the exact
offline simulation at temperature 0, or the paper's rollouts in the decoding regime at T > 0; the regime
analysis reads the temperature-0 table (App. A logs greedy Hydra decoding). Every output is a JSON-ready dict in
the public code's schema where it has one (`per_depth_history`, `per_cell_winners`, self rows, throughput rows);
`write_task_outputs` writes them.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...io import atomic_path, atomic_write_json
from ...models.heads import DraftHeads
from ...models.load import LoadedModel
from .bank import ROOT_ONLY, Paths, TopologyBank, canonical, resolve_tree
from .calibration import PromptTable, write_table
from .capture import build_table, greedy_trajectories
from .engines import Engine, Run, static_policy
from .frontier import assemble_search, debias, kendall_tau, search_stop
from .regimes import FEATURES, regime_summary, step_rows
from .scheduler import feature_depth
from .settings import FrontierSettings
from .throughput import (
    StepPrices,
    candidate_trees,
    greedy_seconds,
    hull,
    ladder_sweep,
    measure_drafting,
    measure_prefill,
    tau_sweep,
    throughput_row,
)

log = logging.getLogger(__name__)


def calibrate(
    loaded: LoadedModel,
    heads: DraftHeads,
    rows: Sequence[dict],
    max_new_tokens: int,
    batch_size: int,
    max_prompt_tokens: int | None = None,
) -> tuple[list[PromptTable], list[list[int]], int]:
    """Greedy continuations of prompt rows (`id`, `prompt`) and their calibration table; prompts longer than
    `max_prompt_tokens` are skipped (the paper's `max_input_tokens`) and counted."""
    encoded = [(str(r["id"]), loaded.encode(r["prompt"])) for r in rows]
    keep = [(i, p) for i, p in encoded if max_prompt_tokens is None or len(p) <= max_prompt_tokens]
    trajs = greedy_trajectories(
        loaded.model, loaded.tokenizer, [p for _, p in keep], max_new_tokens, loaded.stop_criteria(), batch_size
    )
    table = build_table(heads, trajs, loaded.model.get_output_embeddings(), [i for i, _ in keep])
    return table, [p for _, p in keep], len(encoded) - len(keep)


def task_frontier(
    engine: Engine,
    table: Sequence[PromptTable],
    prompts: Sequence[Sequence[int]],
    prices: StepPrices,
    loaded: LoadedModel,
    heads: DraftHeads,
    settings: FrontierSettings,
    regime: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Search, debiasing, prices of the candidates, the throughput frontier, the bank and its sweeps, and the
    regimes of one task (module docstring), every acceptance number from `engine` (`engines`); `prices` holds the
    verification prices, the drafting and prefill ones are added here; `regime`: the decoding regime the bank is
    chosen for (recorded in the bank: the `entmtp` decoder refuses another).

    `include_greedy` (the spec's extension for hardware where speculation can lose, not in the paper): the
    root-only tree (no drafts: a plain greedy step) is a candidate too. It heads the hull and is the bank's S;
    EntMTP* is the faster of it and the fastest searched tree, which stays EntMTPτ's B (and joins the bank when
    the hull, slower than greedy everywhere, holds only the root)."""
    depths = [d for d in settings.depths if d <= heads.num_heads]
    stop_at = search_stop(settings.budgets, settings.tolerance)
    history = {str(d): engine.search(d, stop_at) for d in depths}
    search = assemble_search(
        history,
        settings.budgets,
        settings.tolerance,
        {"depths": depths, "max_children_per_parent": settings.max_children_per_parent, "engine": engine.name},
    )
    default = {settings.default_tree: resolve_tree(settings.default_tree)}
    if max(len(p) for p in default[settings.default_tree]) > heads.num_heads:
        default = {}
    runs: dict[Paths, Run] = {}  # a tree's own run, once (the debiasing's, priced by the throughput stage)

    def own_run(tid: str, paths: Paths) -> Run:
        if paths not in runs:
            runs[paths] = engine.run({tid: paths}, static_policy(tid), settings.score_feature)
        return replace(runs[paths], trees=[[tid] * len(t) for t in runs[paths].trees])

    def self_value(paths: Paths) -> tuple[float, int]:
        run = own_run("self", paths)
        return run.mean_accept, run.n_steps

    self_rows = debias(search, settings.frontier_mode, default, self_value)
    searched = [r for r in self_rows if r["biased"] is not None]
    deltas = [r["self"] - r["biased"] for r in searched]
    candidates = candidate_trees(self_rows, settings.candidate_mode)
    if settings.include_greedy:
        candidates.append({"id": ROOT_ONLY, "tree": [], "depth": 0, "biased": None, "self": 0.0})
    trees = {r["id"]: canonical(r["tree"]) for r in candidates}
    depth = feature_depth(settings.score_feature)
    chain_depth = heads.num_heads if depth < 0 else depth
    measure_drafting(prices, loaded.model, heads, prompts[0], trees, chain_depth, settings.price_reps)
    prices.prefill = measure_prefill(loaded.model, prompts)
    rows = [
        throughput_row(
            prices,
            own_run(r["id"], trees[r["id"]]),
            r["id"],
            trees[r["id"]],
            {"depth": r["depth"], "biased": r["biased"], "self": r["self"]},
        )
        for r in candidates
    ]
    root = [r for r in rows if r["id"] == ROOT_ONLY]
    searched_rows = [r for r in rows if r["id"] not in default and r["id"] != ROOT_ONLY] or rows
    front = hull(root + searched_rows)

    def speed(r: dict) -> tuple[float, int]:  # faster first; ties to the smaller tree
        return r["modeled_tokens_per_s"], -r["n_nodes"]

    aggressive = max(searched_rows, key=speed)
    best = max([aggressive, *root], key=speed)
    small = front[0]
    bank_ids = TopologyBank({i: trees[i] for i in [r["id"] for r in front] + [aggressive["id"]]}).order
    bank = {i: trees[i] for i in bank_ids}
    sweep = tau_sweep(
        engine,
        prices,
        bank,
        small["id"],
        aggressive["id"],
        settings.taus,
        settings.hysteresis,
        settings.score_feature,
        settings.policy_period,
    )
    ladder = ladder_sweep(engine, prices, bank, bank_ids, settings.taus, settings.score_feature, settings.policy_period)
    chosen = sweep[0]
    bank_file = {
        "trees": {i: _bank_entry(next(r for r in rows if r["id"] == i)) for i in bank_ids},
        "order": bank_ids,
        "best": best["id"],
        "conservative": small["id"],
        "aggressive": aggressive["id"],
        "tau_on": chosen["tau_on"],
        "tau_off": chosen["tau_off"],
        "score_feature": settings.score_feature,
        "thresholds": ladder[0]["thresholds"],
        "policy_period": settings.policy_period,
        "engine": engine.name,
        "regime": dict(regime or {"acceptance": "greedy"}),
        "chosen_on": "calibration prompts (modeled tok/s of the τ and ladder sweeps)",
        "modeled": {
            "static_best": best["modeled_tokens_per_s"],
            "binary_tau": chosen["modeled_tokens_per_s"],
            "threshold_ladder": ladder[0]["modeled_tokens_per_s"],
        },
    }
    regime_tree = resolve_tree(settings.regimes_tree)
    steps = step_rows(table, regime_tree) if max(len(p) for p in regime_tree) <= heads.num_heads else []
    tokens = [t.n for t in table]
    greedy = {"modeled_tokens_per_s": sum(tokens) / greedy_seconds(prices, tokens)}
    return {
        "search": search,
        "self": {
            "rows": self_rows,
            "frontier_mode": settings.frontier_mode,
            "max_abs_delta": max((abs(d) for d in deltas), default=None),
            "kendall_tau": kendall_tau([r["biased"] for r in searched], [r["self"] for r in searched]),
            "n_trees": len(searched),
            "engine": engine.name,
        },
        "throughput": {
            "rows": rows,
            "hull": [r["id"] for r in front],
            "best": best["id"],
            "greedy": greedy,
            "candidate_mode": settings.candidate_mode,
            "prices": prices.as_dict(),
            "tau_sweep": sweep,
            "ladder_sweep": ladder,
            "threshold_ladder": {k: ladder[0][k] for k in ("modeled_tokens_per_s", "mean_accept", "share")},
            "engine": engine.name,
        },
        "bank": bank_file,
        "regimes": {
            "rows": steps,
            "summary": regime_summary(steps, settings.target_accept) if steps else None,
            "tree": settings.regimes_tree,
        },
    }


def _bank_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("n_nodes", "tree_depth", "depth", "mean_accept", "modeled_tokens_per_s", "modeled_speedup_vs_greedy")
    return {"paths": row["tree"], **{k: row[k] for k in keys if k in row}}


def task_paths(directory: str | os.PathLike) -> dict[str, Path]:
    """The files of one (heads, task): table.{npz,json}, search.json, self.json, throughput.json, bank.json,
    regimes.{json,csv}."""
    d = Path(directory)
    return {
        "table": d / "table.npz",
        "table_json": d / "table.json",
        "search": d / "search.json",
        "self": d / "self.json",
        "throughput": d / "throughput.json",
        "bank": d / "bank.json",
        "regimes": d / "regimes.json",
        "regimes_csv": d / "regimes.csv",
    }


def write_task_outputs(
    directory: str | os.PathLike, table: Sequence[PromptTable], out: Mapping[str, Any], meta: Mapping[str, Any]
) -> dict[str, Path]:
    paths = task_paths(directory)
    write_table(paths["table"], table, dict(meta))
    for key in ("search", "self", "throughput", "bank"):
        atomic_write_json(paths[key], {**out[key], "meta": dict(meta)})
    reg = out["regimes"]
    atomic_write_json(paths["regimes"], {"summary": reg["summary"], "tree": reg["tree"], "meta": dict(meta)})
    cols = ["sample_idx", "prompt_id", "step", "state", "accept_length", *FEATURES]
    with atomic_path(paths["regimes_csv"]) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(reg["rows"])
    return paths
