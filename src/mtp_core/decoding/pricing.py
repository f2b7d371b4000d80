"""Pricing recorded forwards: what a generation's decoding would cost if each forward cost what a table says, in
one-row (greedy) steps, and the modeled speedup that follows (free of timing noise and of the decoders' own
bookkeeping). Torch-free, so that report jobs can price the forwards a result file records by any cost table: the
ones a job calibrates (`cost.calibrate_on_prompt`), or the ones measured on a GPU at the papers' shapes
(`bench.device_costs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import GenerationResult


class CostModel:
    """Cost of one decoding step by chunk rows, relative to a one-row (greedy) step.

    Starts from `table` {rows: cost} (calibrated seconds or any relative units; linear interpolation, constant
    beyond the ends); `head` {rows: cost} in the same units, when given, is the output head's (final norm and
    lm_head) share of those forwards, which prices forwards that run only some layers (`layer_forward_steps`).
    With `online`, the wall time actually observed between consecutive proposals (verification
    forward + acceptance + bookkeeping) is folded in per rows as an exponential moving average; once both a
    chunk size and the one-row step have `min_count` observations, their observed ratio replaces the table's.
    This corrects a calibration taken at a noisy moment on a shared machine.
    """

    def __init__(
        self,
        table: dict[int, float],
        online: bool = True,
        min_count: int = 3,
        decay: float = 0.1,
        head: dict[int, float] | None = None,
    ):
        if 1 not in table or any(r < 1 or c <= 0 for r, c in table.items()):
            raise ValueError(f"cost_table needs positive costs and a 1-row entry, got {table}")
        if head is not None and (set(head) != set(table) or any(not 0 < head[r] < table[r] for r in table)):
            raise ValueError(f"head costs need the table's rows, each positive and below the forward's: {head}")
        rows = sorted(table)
        self.rows = np.array(rows, dtype=float)
        self.cost = np.array([table[r] for r in rows], dtype=float)
        self.head = np.array([head[r] for r in rows], dtype=float) if head is not None else None
        self.one = float(table[1])
        self.online, self.min_count, self.decay = online, min_count, decay
        self.seen: dict[int, list[float]] = {}  # rows -> [moving average seconds, observations]

    def observe(self, rows: int, seconds: float) -> None:
        if self.online:
            e = self.seen.setdefault(int(rows), [seconds, 0])
            if e[1]:
                e[0] += self.decay * (seconds - e[0])
            e[1] += 1

    def _observed(self, rows: int) -> float | None:
        e = self.seen.get(int(rows))
        return e[0] if e is not None and e[1] >= self.min_count else None

    def one_row_seconds(self) -> float | None:
        """Seconds of a one-row step as observed (None before `min_count` observations)."""
        return self._observed(1)

    def __call__(self, rows: int) -> float:
        one, here = self._observed(1), self._observed(rows)
        if one is not None and here is not None:
            return here / one
        return float(np.interp(rows, self.rows, self.cost)) / self.one

    def head_cost(self, rows: int) -> float:
        """The output head on `rows` rows, in one-row steps (table prices; needs `head`)."""
        if self.head is None:
            raise ValueError("this cost model has no output-head prices (calibrate_on_prompt(..., head=True))")
        return float(np.interp(rows, self.rows, self.head)) / self.one

    def body_cost(self, rows: int) -> float:
        """A forward of `rows` rows without its output head, in one-row steps (table prices; needs `head`): the
        decoder layers, and with them the embedding and the per-forward bookkeeping, which `layer_forward_steps`
        scales with the layers as if they were layer work (an approximation: it under-prices a short forward's
        fixed cost)."""
        return float(np.interp(rows, self.rows, self.cost)) / self.one - self.head_cost(rows)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "table": {int(r): float(c) / self.one for r, c in zip(self.rows, self.cost)},
            "observed": {r: [round(e[0], 5), int(e[1])] for r, e in sorted(self.seen.items())},
        }
        if self.head is not None:
            out["head"] = {int(r): float(c) / self.one for r, c in zip(self.rows, self.head)}
        return out


def modeled_steps(chunk_rows: Sequence[int], cost: CostModel) -> float:
    """Cost of a generation's decoding forwards in one-row (greedy) steps: the sum of `cost(rows)` over the
    forwards after the prefill (a decoder's `extra["chunk_rows"]`, 0 marks a prefill)."""
    return float(sum(cost(r) for r in chunk_rows if r > 0))


def layer_forward_steps(forwards: Sequence[Sequence[Sequence[int]]], num_layers: int, cost: CostModel) -> float:
    """Forwards that run only some of the `num_layers` layers (paper 4's late-only steps and refills), priced in
    one-row steps: a forward is segments [layers, rows] (that many layers on that many rows), then the output head
    on one row, and costs sum(layers / num_layers * body(rows)) + head(1) (`CostModel.body_cost`, `head_cost`).
    A full one-row forward [[num_layers, 1]] costs exactly 1."""
    total = 0.0
    for segments in forwards:
        total += cost.head_cost(1) + sum(n / num_layers * cost.body_cost(r) for n, r in segments)
    return total


def generation_steps(g: GenerationResult, cost: CostModel) -> float:
    """A generation's decoding forwards priced in one-row steps (`modeled_steps`, every turn of a multi-turn
    prompt): by `layer_forwards` (with `num_layers`) when the decoder skips layers (`layer_forward_steps`), else
    by `chunk_rows`; a decoder with neither (greedy) runs one row per forward after each turn's prefill."""
    turns = g.extra.get("turns") or [g.extra]
    if any("layer_forwards" in t for t in turns):
        forwards = [f for t in turns for f in t.get("layer_forwards", [])]
        return layer_forward_steps(forwards, int(turns[0]["num_layers"]), cost)
    rows = [r for t in turns for r in t.get("chunk_rows", [])]
    return modeled_steps(rows, cost) if rows else float(len(g.accepted) - len(turns))


def modeled_speedup(gens: Sequence[GenerationResult], reference: Sequence[GenerationResult], cost: CostModel) -> float:
    """Tokens per priced step of `gens` over those of `reference` (greedy): the speedup a decoder would have if
    each forward cost what `cost` says for its rows, free of timing noise and of the decoders' own bookkeeping
    (prefill excluded). NaN when either priced nothing."""
    steps, ref_steps = sum(generation_steps(g, cost) for g in gens), sum(generation_steps(g, cost) for g in reference)
    if steps <= 0 or ref_steps <= 0:
        return math.nan
    return (sum(len(g.tokens) for g in gens) / steps) / (sum(len(g.tokens) for g in reference) / ref_steps)
