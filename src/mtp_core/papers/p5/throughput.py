"""The throughput frontier (paper 5 §3.2; entmtp `pareto_throughput.py`), EntMTP* and the scheduler's bank and τ
(§4), from prices measured on this machine and the exact simulation of the calibration tables.

Prices (`StepPrices`, measured once per heads on a live cache by `measure_prices`): a verification forward by
chunk rows (the tree core's `cost.calibrate_on_prompt`: 1/4/8/16/32/64 rows, interpolated; CPU costs grow with
rows, 64 rows ~5 one-row steps here), each tree's drafting (its head calls and bookkeeping, median of timed
proposals), the heads' greedy chain the score reads and the drafting after it (the tree reuses the chain's calls
where it can), Hydra++'s prefix-layer update by accepted rows, and each calibration prompt's prefill. A decode is
priced step by step from its simulated rollout: prefill + per step (verification of the tree's padded rows +
drafting + prefix update of the previous step's accepted rows). Modeled tok/s = tokens / priced seconds over all
calibration prompts, prefill included (the paper's protocol); greedy is priced as one-row verifications.

* `throughput_rows`: every candidate tree (default `per-depth-frontier`: the union of the per-depth Pareto rows
  of the self values, plus the published default) with modeled tok/s, seconds per step, tokens per step and
  mean accept; the hull (strictly increasing tok/s by nodes) and EntMTP* = its (the overall) fastest tree.
* `tau_sweep`: EntMTPτ's S (the smallest hull tree) and B (EntMTP*), τ_on over a grid and τ_off = τ_on x each
  hysteresis factor, simulated and priced on the calibration prompts only; the best setting is the bank's.
* `write_bank`: the bank file the `entmtp` decoder reads (`bank.py`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from ...decoding.cache import crop_cache
from ...decoding.cost import calibrate_on_prompt, padded_rows, timed_call
from ...decoding.layers import logits_and_hidden
from ...decoding.pricing import CostModel
from ...decoding.tree import tree_buffers
from ...models.heads import DraftHeads
from ...models.heads.hydra import HydraHeads
from .bank import Paths, tree_depth
from .drafting import HydraStep, MedusaStep
from .engines import Engine, Run
from .frontier import pareto
from .scheduler import Policy, ladder_thresholds
from .settings import CANDIDATE_MODES


@dataclass
class StepPrices:
    """Seconds of a step's parts (module docstring)."""

    verify_rows: list[int]
    verify_seconds: list[float]
    draft: dict[str, float] = field(default_factory=dict)  # tree id -> proposal seconds
    draft_after_chain: dict[str, float] = field(default_factory=dict)  # tree id -> proposal after the chain
    chain: float = 0.0  # the score's greedy chain
    chain_depth: int = 0
    advance: dict[int, float] = field(default_factory=dict)  # prefix-layer update by rows (Hydra++)
    prefill: list[float] = field(default_factory=list)  # per calibration prompt
    pad_small_chunks: bool = True

    @property
    def one_row(self) -> float:
        return float(np.interp(1, self.verify_rows, self.verify_seconds))

    def verify(self, nodes: int) -> float:
        """Seconds of verifying a tree of `nodes` drafts (root row added, small chunks padded as the core does),
        interpolated between the timed chunk sizes. A tree wider than the widest timed chunk is refused, not
        priced as that chunk (`np.interp` would clamp): `settings.rows_needed` says how wide the prices must reach."""
        rows = padded_rows(nodes + 1, self.pad_small_chunks)
        if rows > max(self.verify_rows):
            raise ValueError(
                f"a tree of {nodes} nodes verifies {rows} rows, the prices reach {max(self.verify_rows)} "
                f"(throughput.max_rows must be >= {rows})"
            )
        return float(np.interp(rows, self.verify_rows, self.verify_seconds))

    def advance_s(self, rows: int) -> float:
        if not self.advance:
            return 0.0
        keys = sorted(self.advance)
        return float(np.interp(rows, keys, [self.advance[k] for k in keys]))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "advance": {str(k): v for k, v in self.advance.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepPrices:
        return cls(**{**d, "advance": {int(k): float(v) for k, v in (d.get("advance") or {}).items()}})


def _median_time(fn, reps: int, device: torch.device) -> float:
    return statistics.median(timed_call(fn, device) for _ in range(max(1, reps)))


def measure_verify(model: torch.nn.Module, prompt: Sequence[int], max_rows: int = 64, reps: int = 5) -> StepPrices:
    """Prices of verification forwards by chunk rows on the cache of `prompt` (`cost.calibrate_on_prompt`)."""
    cost: CostModel = calibrate_on_prompt(model, prompt, max_rows=max_rows, reps=reps)
    return StepPrices(verify_rows=[int(r) for r in cost.rows], verify_seconds=[float(c) for c in cost.cost])


@torch.inference_mode()
def measure_drafting(
    prices: StepPrices,
    model: torch.nn.Module,
    heads: DraftHeads,
    prompt: Sequence[int],
    trees: Mapping[str, Paths],
    chain_depth: int,
    reps: int = 5,
) -> None:
    """Add the drafting prices of `trees` (and the chain of `chain_depth`, the prefix update) to `prices`,
    timed on the state right after the prefill of `prompt` (median of `reps`)."""
    dev = next(model.parameters()).device
    ids = torch.tensor([list(prompt)], device=dev)
    logits, h_all = logits_and_hidden(model, 1, True, input_ids=ids)
    root = logits[:, -1].argmax(-1)
    prices.chain_depth = chain_depth
    if isinstance(heads, HydraHeads):
        cache = heads.new_prefix_cache()
        pos = torch.arange(ids.shape[1], device=dev)[None]
        e = heads.prefix_forward(h_all, pos, None, cache)[:, -1]

        def new_step() -> HydraStep | MedusaStep:
            return HydraStep(heads, e, root)

        if cache is not None:
            n0 = cache.get_seq_length()
            for m in range(1, heads.num_heads + 2):
                mask = torch.ones(1, 1, m, n0 + m, dtype=torch.bool, device=dev).tril(n0)

                def advance(m=m, mask=mask) -> None:
                    heads.prefix_forward(h_all[:, -m:], pos[:, -m:] + m, mask, cache)
                    crop_cache(cache, m)

                prices.advance[m] = _median_time(advance, reps, dev)
    else:

        def new_step() -> HydraStep | MedusaStep:
            return MedusaStep(heads, h_all[:, -1])

    if chain_depth:
        prices.chain = _median_time(lambda: new_step().chain(chain_depth), reps, dev)
    for tid, paths in trees.items():
        buffers = tree_buffers(paths)
        prices.draft[tid] = _median_time(lambda b=buffers: new_step().propose(b), reps, dev)
        if chain_depth:
            times = []
            for _ in range(max(1, reps)):
                s = new_step()
                s.chain(chain_depth)
                times.append(timed_call(lambda s=s, b=buffers: s.propose(b), dev))
            prices.draft_after_chain[tid] = statistics.median(times)


@torch.inference_mode()
def measure_prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]]) -> list[float]:
    """Seconds of each prompt's prefill (one timed forward each, on a warm model: the calibration ran before)."""
    dev = next(model.parameters()).device
    out = []
    for p in prompts:
        x = torch.tensor([list(p)], device=dev)
        out.append(_median_time(lambda x=x: model(input_ids=x, logits_to_keep=1), 1, dev))
    return out


# ------------------------------------------------------------------------------------------- pricing


def decode_seconds(
    prices: StepPrices,
    trees: Sequence[str],
    paths: Mapping[str, Paths],
    accepts: Sequence[int],
    scored: Sequence[bool],
    drafting: bool = True,
) -> float:
    """Seconds of one decode's steps: per step the verification of its tree, its drafting (after the score's
    chain on steps that read a score) and the prefix update of the previous step's accepted rows. Without
    `drafting` (every tree the decoder can reach is the root alone: it skips the heads and the prefix layer)
    only the verifications."""
    total = 0.0
    for k, (tid, sc) in enumerate(zip(trees, scored)):
        total += prices.verify(len(paths[tid]))
        if not drafting:
            continue
        if sc:
            total += prices.chain + prices.draft_after_chain.get(tid, prices.draft[tid])
        else:
            total += prices.draft[tid]
        if k:
            total += prices.advance_s(int(accepts[k - 1]) + 1)
    return total


def greedy_seconds(prices: StepPrices, tokens: Sequence[int]) -> float:
    """Greedy decoding of the same tokens: each prompt's prefill, then one one-row step per further token."""
    return float(sum(prices.prefill[: len(tokens)]) + sum((n - 1) * prices.one_row for n in tokens))


def run_seconds(prices: StepPrices, run: Run, bank: Mapping[str, Paths]) -> float:
    """A run's priced seconds: per prompt its prefill and `decode_seconds` of its steps."""
    return float(
        sum(
            prices.prefill[p] + decode_seconds(prices, run.trees[p], bank, run.accepts[p], run.scored[p], run.drafting)
            for p in range(len(run.tokens))
        )
    )


def run_speed(prices: StepPrices, run: Run, bank: Mapping[str, Paths]) -> dict[str, Any]:
    """A run's modeled speed (module docstring): tok/s, against greedy on the same tokens, per decode step, and
    its mean accept; the measured wall-clock tok/s beside where the engine decoded."""
    secs = run_seconds(prices, run, bank)
    tokens, steps = int(sum(run.tokens)), max(1, run.n_steps)
    out = {
        "mean_accept": run.mean_accept,
        "modeled_tokens_per_s": tokens / secs,
        "modeled_speedup_vs_greedy": greedy_seconds(prices, run.tokens) / secs,
        "seconds_per_decode_step": (secs - sum(prices.prefill[: len(run.tokens)])) / steps,
        "output_tokens_per_decode_step": (tokens - len(run.tokens)) / steps,
        "forwards": int(len(run.tokens) + run.n_steps),
    }
    if run.seconds:
        out["measured_tokens_per_s"] = tokens / run.seconds
    return out


def throughput_row(
    prices: StepPrices, run: Run, tid: str, paths: Paths, extra: Mapping[str, Any] | None = None
) -> dict:
    """A candidate tree's row of the throughput frontier (its static run, priced)."""
    return {
        "id": tid,
        "n_nodes": len(paths),
        "tree_depth": tree_depth(paths),
        **(extra or {}),
        "tree": [list(p) for p in paths],
        **run_speed(prices, run, {tid: paths}),
    }


def candidate_trees(self_rows: Sequence[dict], mode: str = "per-depth-frontier") -> list[dict]:
    """The trees stage 2 prices (module docstring); the published extras (biased None) always."""
    if mode not in CANDIDATE_MODES:
        raise ValueError(f"candidate mode {mode!r} is not one of {', '.join(CANDIDATE_MODES)}")
    extra = [r for r in self_rows if r["biased"] is None]
    searched = [r for r in self_rows if r["biased"] is not None]
    if mode == "all":
        chosen = searched
    elif mode == "global-frontier":
        chosen = pareto(searched, "self")
    else:
        chosen = [
            r
            for d in sorted({r["depth"] for r in searched})
            for r in pareto([x for x in searched if x["depth"] == d], "self")
        ]
    return extra + list({r["id"]: r for r in chosen}.values())


def hull(rows: Sequence[dict]) -> list[dict]:
    """The throughput hull: strictly increasing modeled tok/s by nodes."""
    return pareto(rows, "modeled_tokens_per_s")


# ------------------------------------------------------------------------------------------- scheduler

NEVER_LEAVE_S = 1.0  # tau_on >= 1: no score (a probability) exceeds it, EntMTPτ stays on S
NEVER_LEAVE_B = -1.0  # tau_on = tau_off < 0: every score exceeds it, EntMTPτ runs B from the first step


def tau_settings(taus: Sequence[float], hysteresis: Sequence[float]) -> list[tuple[float, float, float]]:
    """(τ_on, τ_off, factor) of the sweep: every τ_on of the grid with τ_off = τ_on x each factor, then the two
    static ends, "never leave S" and "never leave B" (static B: EntMTP*), whatever the grid holds, so the
    sweep's choice is never below either static tree on the calibration prompts; duplicates dropped."""
    grid = [(float(t), float(t) * f, float(f)) for t in taus for f in hysteresis]
    ends = [(NEVER_LEAVE_S, NEVER_LEAVE_S, 1.0), (NEVER_LEAVE_B, NEVER_LEAVE_B, 1.0)]
    seen, out = set(), []
    for on, off, f in grid + ends:
        if (on, off) not in seen:
            seen.add((on, off))
            out.append((on, off, f))
    return out


def tau_sweep(
    engine: Engine,
    prices: StepPrices,
    bank: Mapping[str, Paths],
    small: str,
    big: str,
    taus: Sequence[float],
    hysteresis: Sequence[float],
    feature: str,
    period: int = 1,
) -> list[dict]:
    """EntMTPτ with S = `small` and B = `big` on the calibration prompts (the engine's runs, priced) for every
    setting of `tau_settings`, fastest first (modeled tok/s; ties: the first in grid order). The objective is
    the priced speed, not the accept length: a τ that spends more steps on B accepts more per step and may
    still be slower."""
    pair = {small: bank[small], big: bank[big]}
    rows = []
    for on, off, f in tau_settings(taus, hysteresis):
        pol = Policy(
            "binary_tau", list(pair), conservative=small, aggressive=big, tau_on=on, tau_off=off, period=period
        )
        run = engine.run(pair, pol, feature)
        rows.append(
            {
                "tau_on": on,
                "tau_off": off,
                "hysteresis": f,
                **run_speed(prices, run, pair),
                "share": run.share(list(pair)),
            }
        )
    order = sorted(range(len(rows)), key=lambda i: (-rows[i]["modeled_tokens_per_s"], i))
    return [rows[i] for i in order]


def ladder_candidates(n: int, taus: Sequence[float]) -> list[list[float]]:
    """Threshold sets the EntMTP- sweep tries for a bank of n trees: the public code's default i / n, then for
    every τ of the grid the evenly spaced ladder τ i / (n - 1), i = 1 .. n - 1 (its top threshold τ: above it the
    largest tree; with two trees binary τ without hysteresis). Our family: the paper sweeps τ on calibration and
    leaves the ladder's thresholds unstated."""
    out = [ladder_thresholds(n)]
    for t in taus:
        c = [float(t) * i / (n - 1) for i in range(1, n)]
        if c not in out:
            out.append(c)
    return out


def ladder_sweep(
    engine: Engine,
    prices: StepPrices,
    bank: Mapping[str, Paths],
    order: Sequence[str],
    taus: Sequence[float],
    feature: str,
    period: int = 1,
) -> list[dict]:
    """EntMTP- over the bank (trees in bank `order`) for every threshold set of `ladder_candidates`, priced on the
    calibration prompts, fastest first (ties: the first tried, the public default)."""
    rows = []
    for thr in ladder_candidates(len(order), taus):
        run = engine.run(bank, Policy("threshold_ladder", list(order), thresholds=thr, period=period), feature)
        rows.append({"thresholds": thr, **run_speed(prices, run, bank), "share": run.share(list(order))})
    ranked = sorted(range(len(rows)), key=lambda i: (-rows[i]["modeled_tokens_per_s"], i))
    return [rows[i] for i in ranked]
