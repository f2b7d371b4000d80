"""The acceptance frontier (paper 5 §3.1, Algorithm 1; entmtp `optimize_greedy_trees.py`), its debiasing (§3.1.1,
App. B; `pareto_self_rollouts.py`) and the scheduler's simulation, exact at temperature 0 on calibration tables.

**Simulation**. A tree T (Medusa choices) accepts, in state s, the longest prefix of the rank path
R[s, :] that is a node path of T, capped so that the bonus token stays within the continuation (0-based state
i of n: at most n - i - 2 drafts); decoding starts at state 0 (the prefill emitted x_1) and moves on by
accept + 1. This reproduces the decoder's forward count (1 + steps) and its per-step accept counts (its last
step may accept past the end, where the stop tracker trims: compare up to the cap).

**Greedy search** per depth cap D (Algorithm 1; `greedy_loop`, the one loop of both engines): T = {(0,)}; the
frontier F(T) holds, for the root and every node shallower than D (node order), its next contiguous child (rank =
its child count, if below `max_children`); every f is scored by a one-step "what-if" probe on T's own trajectory
(footnote 1: the steps start where T's do), the best added (ties: smaller rank sum, then shallower, then node
order), and a history row recorded (`depth` = the search's cap, `n_nodes` (root excluded), `mean_accept` = the
what-if mean, the "biased" value, `added_node`, `improvement` over T's own mean, `tree`, `n_steps`, `n_skipped`).
Stop at `int(max(budgets) (1 + tol))` nodes or an empty frontier. Budget winners per (D, B): the best
`mean_accept` among rows with int(B (1 - tol)) <= n_nodes <= int(B (1 + tol)) (ties: fewer nodes). Means are
over all steps of all prompts. An engine supplies only the scorer (`Scorer`): the paper's search (entmtp) scores
one union-tree rollout per addition at T = 0.7 (`rollout.rollout_search`); at T = 0 `greedy_search` computes the
same quantity exactly without a forward (`what_if`: C_f = T u {f} accepts one more exactly where the rank path
enters f within the cap).

**Debiasing** (`debias`): the "self" value of a tree = its mean over its own trajectory (exact here; a rollout
of the tree at T > 0), for every tree on a per-depth frontier of the history (App. B; `rescored_rows`). At T = 0
the gap biased - self isolates the step-boundary part of the paper's one-step bias (a candidate is probed at T's
step starts, not its own).

**Pareto rule** (entmtp): sort by (n_nodes, -score), keep a row iff its score beats the running best by 1e-9.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

from ...decoding.tree import MEDUSA_TOPK
from .bank import Paths, canonical, frontier_id, tree_depth
from .calibration import MISS, PromptTable

BASE = MEDUSA_TOPK + 1  # path codes: digits rank + 1 in 1 .. TOPK, base TOPK + 1 (0 never a digit)


def path_code(path: Sequence[int]) -> int:
    code = 0
    for d, r in enumerate(path):
        code += (int(r) + 1) * BASE**d
    return code


@dataclass
class States:
    """The rank table of every state of every prompt, flattened: `codes[s, d]` = code of R[s, :d+1] (-1 once a
    miss occurs), `cap[s]` = drafts the bonus may follow, `prompt[s]`, `index[s]` (0-based state in its prompt),
    `start[p]` offset of prompt p."""

    codes: np.ndarray
    cap: np.ndarray
    prompt: np.ndarray
    index: np.ndarray
    start: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, table: Sequence[PromptTable], depth: int | None = None) -> States:
        ranks = np.concatenate([t.ranks for t in table]).astype(np.int64)
        if depth is not None:
            ranks = ranks[:, :depth]
        digits = np.where(ranks == MISS, -1, ranks + 1)
        weights = BASE ** np.arange(ranks.shape[1])
        valid = np.cumprod(digits > 0, axis=1).astype(bool)
        codes = np.where(valid, np.cumsum(np.where(digits > 0, digits, 0) * weights, axis=1), -1)
        lengths = np.array([t.n for t in table])
        index = np.concatenate([np.arange(n) for n in lengths])
        prompt = np.repeat(np.arange(len(table)), lengths)
        cap = (lengths[prompt] - index - 2).clip(min=0)
        return cls(codes, cap, prompt, index, np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)


def tree_codes(paths: Iterable[Sequence[int]]) -> np.ndarray:
    return np.array(sorted(path_code(p) for p in paths), dtype=np.int64)


def accept_all(states: States, paths: Iterable[Sequence[int]]) -> np.ndarray:
    """Accept length of the tree in every state (uncapped longest prefix, then capped)."""
    codes = tree_codes(paths)
    depth = states.codes.shape[1]
    inside = np.isin(states.codes, codes) if codes.size else np.zeros_like(states.codes, dtype=bool)
    longest = np.cumprod(inside, axis=1).sum(1) if depth else np.zeros(len(states.cap), dtype=np.int64)
    return np.minimum(longest, states.cap)


def trajectory(states: States, accepts: np.ndarray) -> list[np.ndarray]:
    """Per prompt, the global indices of the states where steps start (0, then + accept + 1, while < n - 1)."""
    out = []
    for s0, n in zip(states.start, states.lengths):
        steps, i = [], 0
        while i < n - 1:
            steps.append(s0 + i)
            i += int(accepts[s0 + i]) + 1
        out.append(np.array(steps, dtype=np.int64))
    return out


@dataclass
class Rollout:
    """A tree's simulated decoding: step starts and accepts per prompt (module docstring)."""

    steps: list[np.ndarray]  # per prompt: global state indices where steps start
    accepts: list[np.ndarray]  # per prompt: accept length of each step (bonus excluded)

    @property
    def all_steps(self) -> np.ndarray:
        return np.concatenate(self.steps) if self.steps else np.zeros(0, dtype=np.int64)

    @property
    def mean_accept(self) -> float:
        acc = np.concatenate(self.accepts)
        return float(acc.mean()) if acc.size else 0.0

    @property
    def n_steps(self) -> int:
        return int(sum(len(s) for s in self.steps))

    def forwards(self) -> list[int]:
        """Per prompt: forwards of a decode (prefill + steps)."""
        return [1 + len(s) for s in self.steps]


def simulate(states: States, paths: Iterable[Sequence[int]]) -> Rollout:
    acc = accept_all(states, list(paths))
    steps = trajectory(states, acc)
    return Rollout(steps, [acc[s] for s in steps])


def frontier_nodes(tree: set[tuple[int, ...]], depth_cap: int, max_children: int) -> list[tuple[int, ...]]:
    """F(T): the next contiguous child of the root and of every node shallower than the cap (node order)."""
    parents = [()] + sorted((p for p in tree if len(p) < depth_cap), key=lambda p: (len(p), p))
    out = []
    for p in parents:
        c = sum(1 for q in tree if len(q) == len(p) + 1 and q[:-1] == p)
        if c < max_children:
            out.append((*p, c))
    return out


def what_if(states: States, tree: Paths, candidates: Sequence[tuple[int, ...]]) -> tuple[Rollout, list[float]]:
    """T's own rollout and, for each candidate f, the mean accept of T u {f} at T's step starts."""
    roll = simulate(states, tree)
    at = roll.all_steps
    base = float(np.concatenate(roll.accepts).sum()) if at.size else 0.0
    means = []
    for f in candidates:
        d = len(f)
        gain = int(((states.codes[at, d - 1] == path_code(f)) & (states.cap[at] >= d)).sum()) if at.size else 0
        means.append((base + gain) / max(1, at.size))
    return roll, means


class Probe(NamedTuple):
    """One iteration's what-if values (Algorithm 1, footnote 1): T's own mean accept, each candidate f's mean accept
    of T u {f} at T's step starts, and T's steps."""

    own: float
    means: list[float]
    n_steps: int


Scorer = Callable[[Paths, Sequence[tuple[int, ...]]], Probe]


def greedy_loop(
    score: Scorer,
    depth_cap: int,
    stop_at: int,
    max_children: int = MEDUSA_TOPK,
    n_skipped: int = 0,
) -> list[dict]:
    """Algorithm 1 for one depth cap (module docstring), the one loop of both engines: `score(T, F(T))` is all an
    engine supplies. Returns the history rows, one per added node."""
    tree: set[tuple[int, ...]] = {(0,)}
    rows = []
    while len(tree) < stop_at:
        cands = frontier_nodes(tree, depth_cap, min(max_children, MEDUSA_TOPK))
        if not cands:
            break
        own, means, steps = score(canonical(tree), cands)
        best = max(range(len(cands)), key=lambda i: (means[i], -sum(cands[i]), -len(cands[i]), -i))
        tree.add(cands[best])
        rows.append(
            {
                "depth": depth_cap,
                "n_nodes": len(tree),
                "mean_accept": means[best],
                "added_node": list(cands[best]),
                "improvement": means[best] - own,
                "tree": [list(p) for p in canonical(tree)],
                "n_steps": steps,
                "n_skipped": n_skipped,
            }
        )
    return rows


def simulated_probe(states: States, tree: Paths, candidates: Sequence[tuple[int, ...]]) -> Probe:
    """The exact scorer at temperature 0 (`what_if`)."""
    own, means = what_if(states, tree, candidates)
    return Probe(own.mean_accept, means, own.n_steps)


def greedy_search(
    states: States,
    depth_cap: int,
    stop_at: int,
    max_children: int = MEDUSA_TOPK,
    n_skipped: int = 0,
) -> list[dict]:
    """Algorithm 1 for one depth cap scored by the exact simulation (`greedy_loop`, `simulated_probe`)."""
    return greedy_loop(partial(simulated_probe, states), depth_cap, stop_at, max_children, n_skipped)


def budget_window(budget: int, tolerance: float) -> tuple[int, int]:
    return int(budget * (1 - tolerance)), int(budget * (1 + tolerance))


def budget_winners(rows: Sequence[dict], budgets: Sequence[int], tolerance: float) -> list[dict]:
    """Per (depth cap, budget): the best `mean_accept` row inside the budget's window (ties: fewer nodes)."""
    out = []
    for depth in sorted({r["depth"] for r in rows}):
        for b in budgets:
            lo, hi = budget_window(b, tolerance)
            inside = [r for r in rows if r["depth"] == depth and lo <= r["n_nodes"] <= hi]
            if inside:
                best = max(inside, key=lambda r: (r["mean_accept"], -r["n_nodes"]))
                out.append({"depth": depth, "budget": b, "window": [lo, hi], **best})
    return out


def pareto(rows: Sequence[dict], key: str, size: str = "n_nodes") -> list[dict]:
    """The rows on the Pareto frontier of `key` against `size` (module docstring)."""
    best, out = -np.inf, []
    for r in sorted(rows, key=lambda r: (r[size], -r[key])):
        if r[key] > best + 1e-9:
            out.append(r)
            best = r[key]
    return out


def search_stop(budgets: Sequence[int], tolerance: float) -> int:
    """Algorithm 1 stops at int(max(budgets) (1 + tolerance)) nodes (entmtp's `max(budgets) * (1 + tol)`)."""
    return int(max(budgets) * (1 + tolerance))


def assemble_search(history: dict[str, list[dict]], budgets: Sequence[int], tolerance: float, settings: dict) -> dict:
    """The search file of every depth cap (the paper's schema): `per_depth_history` {D: rows},
    `per_cell_winners` and `settings`; every history row gets its tree id (`bank.frontier_id`, numbered in
    order over the depths)."""
    idx = 0
    for d, rows in history.items():
        for r in rows:
            r["id"] = frontier_id(idx, r["n_nodes"], int(d))
            idx += 1
    all_rows = [r for rows in history.values() for r in rows]
    return {
        "per_depth_history": history,
        "per_cell_winners": budget_winners(all_rows, budgets, tolerance),
        "settings": {
            "budgets": list(budgets),
            "tolerance": tolerance,
            "stop_at": search_stop(budgets, tolerance),
            **settings,
        },
    }


def search_all(
    table: Sequence[PromptTable],
    depths: Sequence[int],
    budgets: Sequence[int],
    tolerance: float,
    max_children: int,
    n_skipped: int = 0,
) -> dict:
    """The offline search for every depth cap (`assemble_search`)."""
    stop_at = search_stop(budgets, tolerance)
    history = {str(d): greedy_search(States.of(table, d), d, stop_at, max_children, n_skipped) for d in depths}
    settings = {
        "depths": list(depths),
        "max_children_per_parent": max_children,
        "prompts": len(table),
        "states": int(sum(t.n for t in table)),
        "engine": "offline",
    }
    return assemble_search(history, budgets, tolerance, settings)


FRONTIER_MODES = ("global", "per-depth", "all")


def rescored_rows(search: dict, mode: str = "per-depth") -> list[dict]:
    """The history rows the debiasing re-scores (App. B: "every candidate tree topology on the per-depth
    frontier", `per-depth`, the default; entmtp's `global` Pareto frontier over all depths; or `all` rows)."""
    if mode not in FRONTIER_MODES:
        raise ValueError(f"frontier mode {mode!r} is not one of {', '.join(FRONTIER_MODES)}")
    history = search["per_depth_history"].values()
    if mode == "global":
        return pareto([r for h in history for r in h], "mean_accept")
    if mode == "per-depth":
        return [r for h in history for r in pareto(h, "mean_accept")]
    return [r for h in history for r in h]


def debias(search: dict, mode: str, extra: dict | None, self_value: Callable[[Paths], tuple[float, int]]) -> list[dict]:
    """Self values of the trees the debiasing re-scores (`rescored_rows`), `extra` {id: paths} (the published
    default) first; `self_value(paths)` = (mean accept of the tree's own rollout, its steps): exact offline
    (`simulate`) or a rollout. Rows: id, n_nodes, depth (the search's cap; the tree's own depth in
    `tree_depth`), biased (None for extra trees), self, n_steps, tree."""
    chosen = rescored_rows(search, mode)
    out = []
    for tid, paths in (extra or {}).items():
        out.append(_self_row(tid, canonical(paths), None, None, *self_value(canonical(paths))))
    for r in chosen:
        paths = canonical(r["tree"])
        out.append(_self_row(r["id"], paths, r["depth"], r["mean_accept"], *self_value(paths)))
    return out


def simulated_value(table: Sequence[PromptTable]) -> Callable[[Paths], tuple[float, int]]:
    """`debias`'s self value by the exact simulation (temperature 0)."""
    states = States.of(table)

    def value(paths: Paths) -> tuple[float, int]:
        roll = simulate(states, paths)
        return roll.mean_accept, roll.n_steps

    return value


def _self_row(tid: str, paths: Paths, cap: int | None, biased: float | None, value: float, steps: int) -> dict:
    return {
        "id": tid,
        "n_nodes": len(paths),
        "depth": cap if cap is not None else tree_depth(paths),
        "tree_depth": tree_depth(paths),
        "biased": biased,
        "self": value,
        "n_steps": steps,
        "tree": [list(p) for p in paths],
    }


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-a between two score lists (None for fewer than two items)."""
    n = len(a)
    if n < 2:
        return None
    a, b = np.asarray(a), np.asarray(b)
    i, j = np.triu_indices(n, 1)
    s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return float(s.sum() / len(s))
