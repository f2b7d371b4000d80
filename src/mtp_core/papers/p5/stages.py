"""Paper 5's offline pipeline for one task and one set of heads, as the frontier job and `mtp-repro tree-search`
run it: calibration (greedy continuations of the calibration prompts and their table) -> Algorithm 1 per depth
cap -> debiasing -> prices and the throughput frontier (EntMTP*) -> the scheduler's bank and τ sweep -> the regime
analysis (App. A). Every output is a JSON-ready dict in the public code's schema where it has one
(`per_depth_history`, `per_cell_winners`, self rows, throughput rows); `write_task_outputs` writes them.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...heads import DraftHeads
from ...io import atomic_path, atomic_write_json
from ...models import LoadedModel
from .bank import ROOT_ONLY, canonical, resolve_tree
from .calibration import PromptTable, build_table, write_table
from .capture import greedy_trajectories
from .frontier import FRONTIER_MODES, States, debias, kendall_tau, search_all
from .regimes import FEATURES, regime_summary, step_rows
from .scheduler import Policy, feature_depth, ladder_thresholds
from .throughput import (
    CANDIDATE_MODES,
    StepPrices,
    candidate_trees,
    hull,
    measure_drafting,
    measure_prefill,
    policy_rollout,
    tau_sweep,
    throughput_row,
)

log = logging.getLogger(__name__)
DEFAULT_TAUS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class FrontierSettings:
    """The offline pipeline's settings (config `papers.p5.search`, `.debias`, `.throughput`, `.scheduler`,
    `.regimes`; defaults = the paper's code's, budgets in drafted nodes)."""

    depths: tuple[int, ...] = (1, 2, 3, 4)
    budgets: tuple[int, ...] = (16, 32, 64)
    tolerance: float = 0.4
    max_children_per_parent: int = 10
    default_tree: str = "mc_sim_7b_63"
    frontier_mode: str = "global"
    candidate_mode: str = "per-depth-frontier"
    score_feature: str = "path_value_greedy_depth4"
    taus: tuple[float, ...] = DEFAULT_TAUS
    hysteresis: tuple[float, ...] = (1.0, 0.5)
    policy_period: int = 1
    regimes_tree: str = "mc_sim_7b_63"
    target_accept: int = 1
    price_reps: int = 5
    include_greedy: bool = False

    def __post_init__(self) -> None:
        if self.frontier_mode not in FRONTIER_MODES:
            raise ValueError(f"debias.frontier_mode {self.frontier_mode!r} is not one of {FRONTIER_MODES}")
        if self.candidate_mode not in CANDIDATE_MODES:
            raise ValueError(f"throughput.candidate_mode {self.candidate_mode!r} is not one of {CANDIDATE_MODES}")
        feature_depth(self.score_feature)


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
    table: Sequence[PromptTable],
    prompts: Sequence[Sequence[int]],
    prices: StepPrices,
    loaded: LoadedModel,
    heads: DraftHeads,
    settings: FrontierSettings,
    n_skipped: int = 0,
) -> dict[str, Any]:
    """Search, debiasing, prices of the candidates, the throughput frontier, the bank and the regimes of one task
    (module docstring); `prices` holds the verification prices, the drafting and prefill ones are added here.

    `include_greedy` (the spec's extension for hardware where speculation can lose, not in the paper): the
    root-only tree (no drafts: a plain greedy step) is a candidate too. It heads the hull and is the bank's S;
    EntMTP* is the faster of it and the fastest searched tree, which stays EntMTPτ's B (and joins the bank when
    the hull, slower than greedy everywhere, holds only the root)."""
    depths = [d for d in settings.depths if d <= heads.num_heads]
    search = search_all(
        table, depths, settings.budgets, settings.tolerance, settings.max_children_per_parent, n_skipped
    )
    default = {settings.default_tree: resolve_tree(settings.default_tree)}
    if max(len(p) for p in default[settings.default_tree]) > heads.num_heads:
        default = {}
    self_rows = debias(table, search, settings.frontier_mode, default)
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
    states = States.of(table)
    rows = [
        throughput_row(
            prices,
            states,
            table,
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
    bank_ids = [r["id"] for r in front] + ([aggressive["id"]] if aggressive not in front else [])
    bank = {i: trees[i] for i in bank_ids}
    sweep = tau_sweep(
        table,
        prices,
        {small["id"]: trees[small["id"]], aggressive["id"]: trees[aggressive["id"]]},
        small["id"],
        aggressive["id"],
        settings.taus,
        settings.hysteresis,
        settings.score_feature,
        settings.policy_period,
    )
    chosen = sweep[0]
    ladder = ladder_thresholds(len(bank_ids))
    ladder_run = policy_rollout(
        table,
        states,
        bank,
        Policy("threshold_ladder", bank_ids, thresholds=ladder, period=settings.policy_period),
        settings.score_feature,
        prices,
    )
    bank_file = {
        "trees": {i: _bank_entry(next(r for r in rows if r["id"] == i)) for i in bank_ids},
        "order": bank_ids,
        "best": best["id"],
        "conservative": small["id"],
        "aggressive": aggressive["id"],
        "tau_on": chosen["tau_on"],
        "tau_off": chosen["tau_off"],
        "score_feature": settings.score_feature,
        "thresholds": ladder,
        "policy_period": settings.policy_period,
        "chosen_on": "calibration prompts (modeled tok/s of the τ sweep)",
        "modeled": {
            "static_best": best["modeled_tokens_per_s"],
            "binary_tau": chosen["modeled_tokens_per_s"],
            "threshold_ladder": ladder_run["modeled_tokens_per_s"],
        },
    }
    regime_tree = resolve_tree(settings.regimes_tree)
    steps = step_rows(table, regime_tree) if max(len(p) for p in regime_tree) <= heads.num_heads else []
    greedy = {
        "modeled_tokens_per_s": int(sum(t.n for t in table))
        / (sum(prices.prefill) + sum((t.n - 1) * prices.one_row for t in table))
    }
    return {
        "search": search,
        "self": {
            "rows": self_rows,
            "frontier_mode": settings.frontier_mode,
            "max_abs_delta": max((abs(d) for d in deltas), default=None),
            "kendall_tau": kendall_tau([r["biased"] for r in searched], [r["self"] for r in searched]),
            "n_trees": len(searched),
        },
        "throughput": {
            "rows": rows,
            "hull": [r["id"] for r in front],
            "best": best["id"],
            "greedy": greedy,
            "candidate_mode": settings.candidate_mode,
            "prices": prices.as_dict(),
            "tau_sweep": sweep,
            "threshold_ladder": {k: ladder_run[k] for k in ("modeled_tokens_per_s", "mean_accept", "share")},
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
