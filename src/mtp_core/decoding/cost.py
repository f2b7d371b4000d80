"""The wall-clock guard shared by every drafting decoder (probing, prompt lookup, lookahead, STAND).

Not from a paper: issue 5's CPU rule "no decoder may be slower than reference greedy by more than 5% on any
category: choose the tree size from the measured forward cost, fall back to greedy when drafting cannot pay". On
a GPU a verification forward costs about the same for 1 or 60 rows; on a CPU a 4-row forward costs ~1.45x a
one-row forward and a 31-row one 2.2-3.2x, so a draft pays only when it is accepted often enough.

* `CostModel` (in `pricing`, torch-free): step cost by chunk rows relative to a one-row (greedy) step; calibrated
  here, corrected online.
* `timed_call`: the seconds of one call, the device synchronised around it (CUDA work is asynchronous: without it
  a GPU timing measures only the kernels' launches). Every price below and the papers' own are timed through it.
* `measure_costs`: the calibration (median of interleaved timed verification forwards on the live cache);
  `calibrate_on_prompt`: a benchmark's fixed prices of each step, which `pricing` turns into a timing-noise-free
  speed (with the output head's own prices by rows, also of forwards that skip layers: paper 4).
* `ShrunkRates`: acceptance counts at two horizons, every call so far and the current batch (decayed), the batch's
  rate shrunk towards the long-run one: drafts pay in stretches (a model copying its prompt, a code block), so a
  decision that follows only the long-run mean drafts where nothing is accepted and misses the stretches.
* `DepthAcceptance`: per-depth acceptance estimates of path drafters, giving expected tokens per depth cap.
* `WallClockGuard`: the decision. Every option k (a node count, a depth cap) has expected tokens E(k) and chunk
  rows R(k); its rate is E(k) / (cost(R(k)) + drafting overhead), the overhead being the measured bookkeeping
  per drafted step in one-row-step units. The best option is drafted only if its rate beats a one-row greedy
  step's by `min_gain`; otherwise the step is greedy, and every `probe_every`-th consecutive greedy decision is a
  probe so that the estimates keep growing (path drafters probe with their cheapest chunk, see `ngram`). Until
  `min_obs` observations exist the caller explores.
  Cost-aware variants (used by the path drafters, whose full drafts can cost several greedy steps): the probe
  interval grows so that probes cost at most `min_gain / 2` of the steps, i.e. max(`probe_every`,
  (cost(probe) - 1) / (min_gain / 2)) greedy steps; exploring stops once it has cost `min_obs` one-row steps
  beyond greedy (the estimates then start from what was seen, shrunk towards 0).

Parameters (decoder params, the same names for every decoder): `adaptive` (False: no guard), `cost_table`
({rows: cost}, instead of calibrating), `online_cost` (True), `min_gain` (0.05), `probe_every` (32), `min_obs`
(32), `calib_reps` (3), `local_prior` (4: pseudo-observations of the long-run rate in a batch's estimate),
`local_decay` (0.9: weight of a batch's older observations per new one). The calibration falls into the first
`generate` of each batch size.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from . import layers as L
from .cache import crop_cache
from .pricing import CostModel
from .static import ROW_BUCKETS, StaticSession, bucket_rows
from .tree import (
    Draft,
    TreeContext,
    ancestor_mask,
    chain_buffers,
    chunk_attention_mask,
    tree_buffers_from_parents,
    verify_tree,
)


def timed_call(fn: Callable[[], Any], device: torch.device | str) -> float:
    """Seconds of `fn()`; on a CUDA device the work queued before is finished first and `fn`'s own at the end."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def padded_rows(rows: int, pad_small_chunks: bool) -> int:
    """Rows the verification forward really runs (`tree.verify._chunk_layout` pads 2-3 rows to 4)."""
    return 4 if pad_small_chunks and rows in (2, 3) else rows


def calibration_rows(max_rows: int) -> list[int]:
    """Chunk sizes to time: 1, 4, 8, 16, 32, 64 up to `max_rows`, and `max_rows` itself."""
    return sorted({r for r in (1, 4, 8, 16, 32, 64) if r <= max_rows} | {max(1, max_rows)})


def dummy_draft(ctx: TreeContext, rows: int, chain: bool = False) -> Draft | None:
    """A draft of `rows` chunk rows for timing: a star under the root (a tree mask) or a chain (causal)."""
    if rows <= 1:
        return None
    buffers = chain_buffers(rows - 1) if chain else tree_buffers_from_parents([-1] + [0] * (rows - 1))
    return Draft(buffers, ctx.root[:, None].expand(ctx.batch_size, rows - 1).clone())


def measure_costs(
    model: torch.nn.Module, ctx: TreeContext, drafts: Mapping[int, Draft | None], reps: int, pad_small_chunks: bool
) -> dict[int, float]:
    """Seconds of one verification forward per chunk rows on the live cache: the median of `reps` interleaved
    timings of each draft (None: a plain one-row step). The cache is restored after each forward."""
    times: dict[int, list[float]] = {r: [] for r in drafts}
    device = ctx.root.device
    for _ in range(max(1, reps)):
        for rows, d in drafts.items():
            before = ctx.cache.get_seq_length()
            if d is None:
                d = Draft.empty(ctx.batch_size, device)

            def verify(d: Draft = d) -> None:
                verify_tree(
                    model,
                    ctx,
                    d.buffers,
                    d.candidates,
                    extra_parents=d.extra_parents,
                    extra_embeds=d.extra_embeds,
                    pad_small_chunks=pad_small_chunks,
                    commit=False,
                )

            times[rows].append(timed_call(verify, device))
            crop_cache(ctx.cache, ctx.cache.get_seq_length() - before)
    return {r: statistics.median(t) for r, t in times.items()}


class ShrunkRates:
    """Hit rates from counts at two horizons: `hits` / `tries` over every observation so far (the long run) and
    the same counts of the current batch (`reset_local` per `generate`), decayed by `decay` per new observation.
    The long-run rate is hits / (tries + 1) (+1 shrinks towards 0 when little is known); the estimate is the
    batch's counts plus `prior` pseudo-observations at the long-run rate: (h + prior r) / (t + prior). With
    prior 4 one fully accepted probe lifts a long-run rate of 0.3 to 0.44, one rejection lowers it to 0.24."""

    def __init__(self, shape: tuple[int, ...], prior: float = 4.0, decay: float = 0.9):
        if prior <= 0 or not 0.0 < decay <= 1.0:
            raise ValueError(f"local_prior must be > 0 and local_decay in (0, 1], got {prior}, {decay}")
        self.prior, self.decay = prior, decay
        self.hits, self.tries = np.zeros(shape), np.zeros(shape)
        self.hits_local, self.tries_local = np.zeros(shape), np.zeros(shape)

    def reset_local(self) -> None:
        self.hits_local[:] = 0.0
        self.tries_local[:] = 0.0

    def add(self, hits: np.ndarray, tries: np.ndarray, where: Any = slice(None)) -> None:
        """Add counts at index `where` (the batch counts there decay first)."""
        self.hits_local[where] *= self.decay
        self.tries_local[where] *= self.decay
        for a, x in ((self.hits, hits), (self.tries, tries), (self.hits_local, hits), (self.tries_local, tries)):
            a[where] += x

    def rates(self) -> np.ndarray:
        long_run = self.hits / (self.tries + 1.0)
        return (self.hits_local + self.prior * long_run) / (self.tries_local + self.prior)


def measure_head_costs(model: torch.nn.Module, rows: Sequence[int], reps: int) -> dict[int, float]:
    """Seconds of the output head (final norm and lm_head) on `rows` rows of hidden states: medians of `reps`
    interleaved timings."""
    p = next(model.parameters())
    hidden = {r: torch.randn(1, r, int(model.config.hidden_size), device=p.device, dtype=p.dtype) for r in rows}
    times: dict[int, list[float]] = {r: [] for r in rows}
    for _ in range(max(1, reps)):
        for r, h in hidden.items():
            times[r].append(timed_call(lambda h=h: L.head(model, h), p.device))
    return {r: statistics.median(t) for r, t in times.items()}


def calibrate_on_prompt(
    model: torch.nn.Module,
    prompt: Sequence[int],
    max_rows: int = 64,
    reps: int = 5,
    pad_small_chunks: bool = True,
    rows: Sequence[int] | None = None,
    head: bool = False,
) -> CostModel:
    """A fixed cost model measured on the KV cache of `prompt` (one prefill, then `measure_costs` of tree chunks
    of `rows` rows, default `calibration_rows(max_rows)`; `max_rows` is unused when `rows` is given): what a
    benchmark prices each decoder's steps with. `head`: also time the output head on the rows each chunk really
    runs (padded like it; `measure_head_costs`), for `layer_forward_steps`."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt)], device=device)
    rows = sorted(set(rows)) if rows is not None else calibration_rows(max_rows)
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        nxt = model(input_ids=ids, cache=cache, logits_to_keep=1).logits[:, -1].argmax(-1)
        pos = torch.tensor([ids.shape[1]], device=device)
        ctx = TreeContext(cache, torch.ones_like(ids, dtype=torch.bool), nxt, pos)
        drafts = {r: dummy_draft(ctx, r) for r in rows}
        table = measure_costs(model, ctx, drafts, reps, pad_small_chunks)
        head_costs = None
        if head:
            ran = {r: padded_rows(r, pad_small_chunks) for r in rows}
            timed = measure_head_costs(model, sorted(set(ran.values())), reps)
            head_costs = {r: timed[ran[r]] for r in rows}
    return CostModel(table, online=False, head=head_costs)


class DepthAcceptance(ShrunkRates):
    """Acceptance of path drafts by depth: depth d is tried when the row drafted at least d tokens on some path
    and accepted d-1; it hits when d were accepted. p_d = `rates()`; a draft capped at depth c is expected to
    emit 1 + sum_{j<=c} prod_{i<=j} p_i tokens."""

    def __init__(self, depth: int, prior: float = 4.0, decay: float = 0.9):
        super().__init__((max(1, depth),), prior, decay)

    def observe(self, drafted: np.ndarray, accepted: np.ndarray) -> None:
        """`drafted` [B]: depth each row drafted; `accepted` [B]: drafts it accepted."""
        d = np.arange(1, self.tries.size + 1)[None]
        drafted, accepted = np.asarray(drafted)[:, None], np.asarray(accepted)[:, None]
        self.add((d <= np.minimum(accepted, drafted)).sum(0), (d <= np.minimum(accepted + 1, drafted)).sum(0))

    def expected_tokens(self) -> np.ndarray:
        """[D+1] expected tokens per forward with the draft capped at depth 0..D (bonus token included)."""
        return 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(self.rates()))])


GUARD_PARAMS = (
    "adaptive",
    "calib_reps",
    "cost_table",
    "local_decay",
    "local_prior",
    "min_gain",
    "min_obs",
    "online_cost",
    "probe_every",
)  # the guard's decoder parameters (module docstring)


class WallClockGuard:
    """The decision and its timing state for one decoder instance; see the module docstring."""

    def __init__(self, params: Mapping[str, Any]):
        self.enabled = bool(params.get("adaptive", False))
        self.min_gain = float(params.get("min_gain", 0.05))
        self.probe_every = int(params.get("probe_every", 32))
        self.min_obs = int(params.get("min_obs", 32))
        self.calib_reps = int(params.get("calib_reps", 3))
        self.local_prior = float(params.get("local_prior", 4.0))
        self.local_decay = float(params.get("local_decay", 0.9))
        self.online = bool(params.get("online_cost", True))
        table = params.get("cost_table")
        self.fixed = CostModel({int(k): float(v) for k, v in table.items()}, online=self.online) if table else None
        self.cost: CostModel | None = self.fixed
        self._by_batch: dict[int, CostModel] = {}  # batch size -> calibrated cost model
        self.one_row_s: float | None = None  # calibrated seconds of a one-row forward
        self.overhead_s = 0.0  # running mean of the drafting bookkeeping per drafted step
        self.greedy_run = 0  # consecutive greedy decisions
        self.explored = 0.0  # extra cost of the exploring steps so far, in one-row steps
        self._last_t: float | None = None  # end of the previous proposal
        self._last_rows = 1
        self.log: dict[str, int] = {"draft": 0, "greedy": 0, "probe": 0, "explore": 0}

    def new_run(self) -> None:
        """Start a run afresh: no exploration spent, no greedy streak, no counts; the calibrated cost models and the
        bookkeeping estimate (the machine's) stay."""
        self.explored, self.greedy_run, self._last_t = 0.0, 0, None
        self.log = dict.fromkeys(self.log, 0)

    def start(self, batch_size: int, measure: Callable[[], dict[int, float]]) -> None:
        """Per batch: use the cost model of this batch size (calibrated by `measure()` the first time)."""
        if self.enabled and self.fixed is None:
            if batch_size not in self._by_batch:
                table = measure()
                self.one_row_s = table[1]
                self._by_batch[batch_size] = CostModel(table, online=self.online)
            self.cost = self._by_batch[batch_size]
        self._last_t = None  # the first proposal follows the prefill, not a step

    def tick(self) -> float:
        """Start of a proposal: the time since the previous one ended is that step's cost. Returns now."""
        now = time.perf_counter()
        if self.enabled and self.cost is not None and self._last_t is not None:
            self.cost.observe(self._last_rows, now - self._last_t)
        return now

    def choose(self, expected: Mapping[int, float], rows: Mapping[int, int]) -> tuple[str, int]:
        """('draft' | 'greedy', best option) among options k with expected tokens `expected[k]` and chunk
        `rows[k]` (already padded); ties go to the smaller option."""
        cost = self.cost
        if cost is None:
            raise RuntimeError("wall-clock guard used before its cost model exists (start() not called)")
        one_s = cost.one_row_seconds() or self.one_row_s
        over = self.overhead_s / one_s if one_s else 0.0
        rate = {k: expected[k] / (cost(rows[k]) + over) for k in expected}
        best = max(rate, key=lambda k: (rate[k], -k))
        if rate[best] >= (1.0 + self.min_gain) / cost(1):
            return "draft", best
        return "greedy", best

    def greedy_or_probe(self, probe_rows: int | None = None) -> str:
        """After a greedy decision: 'greedy', or 'probe' on every `probe_every`-th one in a row; with
        `probe_rows` (the probe's chunk) on every max(probe_every, (cost - 1) / (min_gain / 2))-th one."""
        self.greedy_run += 1
        every = self.probe_every
        if probe_rows is not None and self.cost is not None and self.min_gain > 0:
            every = max(every, math.ceil((self.cost(probe_rows) - 1.0) / (self.min_gain / 2)))
        if self.greedy_run < every:
            return "greedy"
        self.greedy_run = 0
        return "probe"

    def may_explore(self, rows: int) -> bool:
        """Whether one more exploring step of `rows` keeps the exploration's extra cost within `min_obs` one-row
        steps."""
        return self.cost is not None and self.explored + self.cost(rows) - 1.0 <= self.min_obs

    def done(self, mode: str, rows: int, t0: float | None = None) -> None:
        """End of a proposal: count `mode`, remember the step's `rows`; with `t0` (a drafted step) fold the
        proposal's duration into the overhead estimate."""
        self.log[mode] += 1
        if mode == "explore" and self.cost is not None:
            self.explored += self.cost(rows) - 1.0
        now = time.perf_counter()
        if t0 is not None:
            dt = now - t0
            self.overhead_s = dt if self.overhead_s == 0 else 0.9 * self.overhead_s + 0.1 * dt
        self._last_rows, self._last_t = rows, now

    def as_dict(self) -> dict[str, Any]:
        return {"steps": dict(self.log), "cost": self.cost.as_dict() if self.cost else None}


@torch.inference_mode()
def measure_static_costs(
    model: torch.nn.Module, prompt: Sequence[int], rows: Sequence[int], reps: int = 5
) -> dict[str, Any]:
    """The compiled twin of `cost.calibrate_on_prompt`: seconds of one verification forward of a star-shaped tree
    chunk of R rows (R in `rows`, each a `ROW_BUCKETS` size: the shapes a compiled decoder runs) on the static cache
    of `prompt`, with a 4-D mask and the logits of every row, as tree verification needs; medians of `reps`
    interleaved timings after one untimed call per shape (its compilation, reported as `compile_s`)."""
    if any(r != bucket_rows(r) for r in rows):
        raise ValueError(f"rows must be compiled sizes {ROW_BUCKETS}, got {list(rows)}")
    session = StaticSession(model)
    device = session.device
    session.begin(1, len(prompt) + max(rows))
    ids = torch.tensor([list(prompt)], device=device)
    session.prefill(ids, None, torch.arange(len(prompt), device=device)[None])
    filled = len(prompt)
    chunks = {}
    for r in rows:
        parents = torch.tensor([-1] + [0] * (r - 1))
        anc = ancestor_mask(parents)
        kv = torch.ones(1, filled, dtype=torch.bool, device=device)
        mask = chunk_attention_mask(kv, anc.to(device), slots=session.length)
        pos = (filled + anc.sum(1) - 1).to(device)[None]
        chunks[r] = (ids[:, -1:].expand(1, r).contiguous(), mask, pos)

    def verify(r: int) -> None:
        session.step(*chunks[r], keep=0).argmax(-1)
        session.crop(r)

    for r in rows:
        verify(r)  # compiles this shape
        verify(r)  # CUDA graphs record on a shape's second call
    times: dict[int, list[float]] = {r: [] for r in rows}
    for _ in range(max(1, reps)):
        for r in rows:
            times[r].append(timed_call(lambda r=r: verify(r), device))
    return {"seconds": {r: statistics.median(t) for r, t in times.items()}, "compile_s": session.compile_s}
