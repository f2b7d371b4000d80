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
from ...decoding.cost import CostModel, calibrate_on_prompt, padded_rows, timed_call
from ...heads import DraftHeads
from ...heads.hydra import HydraHeads
from ...masks.tree import tree_buffers
from .bank import Paths, canonical, tree_depth
from .calibration import PromptTable
from .drafting import HydraStep, MedusaStep
from .frontier import States, accept_all, pareto, simulate
from .scheduler import Policy, feature_depth, score

CANDIDATE_MODES = ("per-depth-frontier", "global-frontier", "all")


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
        """Seconds of verifying a tree of `nodes` drafts (root row added, small chunks padded as the core does)."""
        rows = padded_rows(nodes + 1, self.pad_small_chunks)
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
    out = model(input_ids=ids, output_hidden_states=True)
    h_all, root = out.hidden_states[-1], out.logits[:, -1].argmax(-1)
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


def greedy_seconds(prices: StepPrices, table: Sequence[PromptTable]) -> float:
    return float(sum(prices.prefill) + sum((t.n - 1) * prices.one_row for t in table))


def static_rollout_seconds(
    prices: StepPrices, states: States, table: Sequence[PromptTable], tid: str, paths: Paths
) -> tuple[float, Any]:
    roll = simulate(states, paths)
    secs = sum(prices.prefill)
    for acc in roll.accepts:
        secs += decode_seconds(
            prices, [tid] * len(acc), {tid: paths}, acc.tolist(), [False] * len(acc), drafting=bool(paths)
        )
    return secs, roll


def throughput_row(
    prices: StepPrices,
    states: States,
    table: Sequence[PromptTable],
    tid: str,
    paths: Paths,
    extra: Mapping[str, Any] | None = None,
) -> dict:
    secs, roll = static_rollout_seconds(prices, states, table, tid, paths)
    tokens = int(sum(t.n for t in table))
    steps = roll.n_steps
    return {
        "id": tid,
        "n_nodes": len(paths),
        "tree_depth": tree_depth(paths),
        **(extra or {}),
        "tree": [list(p) for p in paths],
        "mean_accept": roll.mean_accept,
        "modeled_tokens_per_s": tokens / secs,
        "modeled_speedup_vs_greedy": greedy_seconds(prices, table) / secs,
        "seconds_per_decode_step": (secs - sum(prices.prefill)) / max(1, steps),
        "output_tokens_per_decode_step": (tokens - len(table)) / max(1, steps),
        "forwards": int(len(table) + steps),
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


def policy_rollout(
    table: Sequence[PromptTable],
    states: States,
    bank: Mapping[str, Paths],
    policy: Policy,
    feature: str,
    prices: StepPrices | None = None,
) -> dict:
    """The scheduler simulated on the calibration table (batch 1, fresh signal): per prompt the tree of every
    step, its accept length, and (with prices) the priced seconds. Exact at temperature 0: the decoder's choices
    follow from the same p0 and chain probabilities."""
    accepts = {tid: accept_all(states, paths) for tid, paths in bank.items()}
    drafting = any(bank[tid] for tid in policy.reachable)
    depth = feature_depth(feature)
    chain_d = states.codes.shape[1] if depth < 0 else depth
    out_trees, out_acc, secs = [], [], 0.0
    for p, (s0, n) in enumerate(zip(states.start, states.lengths)):
        t = table[p]
        policy.reset()
        trees, accs, scored = [], [], []
        i = 0
        while i < n - 1:
            evaluate = policy.scores_now
            value = float(score(feature, t.p0[i], t.chain[i, :chain_d])) if evaluate else None
            tid = policy.choose(value)
            a = int(accepts[tid][s0 + i])
            trees.append(tid)
            accs.append(a)
            scored.append(evaluate)
            i += a + 1
        out_trees.append(trees)
        out_acc.append(accs)
        if prices is not None:
            secs += prices.prefill[p] + decode_seconds(prices, trees, bank, accs, scored, drafting=drafting)
    res = {"trees": out_trees, "accepts": out_acc}
    if prices is not None:
        tokens = int(sum(t.n for t in table))
        res["modeled_tokens_per_s"] = tokens / secs
        res["modeled_speedup_vs_greedy"] = greedy_seconds(prices, table) / secs
    steps = [a for acc in out_acc for a in acc]
    res["mean_accept"] = float(np.mean(steps)) if steps else 0.0
    res["share"] = {tid: float(np.mean([x == tid for tr in out_trees for x in tr])) for tid in bank}
    return res


def tau_sweep(
    table: Sequence[PromptTable],
    prices: StepPrices,
    bank: Mapping[str, Paths],
    small: str,
    big: str,
    taus: Sequence[float],
    hysteresis: Sequence[float],
    feature: str,
    period: int = 1,
) -> list[dict]:
    """EntMTPτ on the calibration prompts for every τ_on in `taus` and τ_off = τ_on x each factor (module
    docstring), best first (ties: the first in grid order)."""
    states = States.of(table)
    rows = []
    for tau in taus:
        for f in hysteresis:
            pol = Policy(
                "binary_tau", list(bank), conservative=small, aggressive=big, tau_on=tau, tau_off=tau * f, period=period
            )
            r = policy_rollout(table, states, bank, pol, feature, prices)
            rows.append(
                {
                    "tau_on": tau,
                    "tau_off": tau * f,
                    "hysteresis": f,
                    **{k: r[k] for k in ("modeled_tokens_per_s", "modeled_speedup_vs_greedy", "mean_accept", "share")},
                }
            )
    order = sorted(range(len(rows)), key=lambda i: (-rows[i]["modeled_tokens_per_s"], i))
    return [rows[i] for i in order]


def bank_trees(rows: Sequence[dict]) -> dict[str, Paths]:
    return {r["id"]: canonical(r["tree"]) for r in rows}
