"""Paper 2's loss (`losses.p2_loss`) on hidden states, in chunks of target positions with recomputation, so that
training never holds a full-vocabulary tensor for every position at once.

`p2_loss_hidden(project, h0, hidden, ids, cfg)` takes the trunk's h^0 and the heads' h^k with the shared output
head `project` (the trunk's lm_head) and returns what `p2_loss` returns on their logits. A chunk is a range of
target tokens t_a .. t_{b-1} of every window: the main head's rows a-1 .. b-2, head k's rows a-1-k .. b-2-k (from
row 0 on: head k has no target before t_{k+1}). Every term of a target lies in one chunk: its main-head row (the
CE, the teacher of every head on that target, Eq. 2), the Top-N index set drawn from that row once for all
heads (Eq. 3), and an ensemble's teacher rows P^j on the same target (App. E.2.2). So each chunk adds its terms'
sums, each divided by the term's row count over the whole batch, and the chunks add up to the loss of the whole
batch (float rounding apart: sums in another order). Each chunk runs inside `torch.utils.checkpoint`: its forward
keeps nothing but its inputs (views of h^0 and h^k, alive anyway) and its backward recomputes its logits, one
chunk at a time. `cfg.chunk_rows` is the number of logit rows of one depth in a chunk: ⌊chunk_rows / B⌋ target
positions (at least 1) of each of the micro-batch's B windows; a batch that fits in one chunk (or `chunk_rows`
null) takes `p2_loss` on whole logits, unchanged (embedded and tiny scale: 8 x 127 and 4 x 31 rows per depth, below
the default 1024).

Memory at the paper's shape (B 2 x S 4096 windows, V 151,680, bf16 autocast; R = B(S-1) = 8190 rows per depth;
an fp32 [R, V] tensor is 4.97 GB, the bf16 logits of one depth 2.48 GB):

* kept from the forward for the backward. Before (whole logits): each depth's fp32 log-softmax of its CE, 4.97
  GB per depth: 9.9 GB at K = 1, 24.8 GB at K = 4 (the Top-N KL keeps [R, N] tensors, 0.33 GB at N = 10,000;
  `norm: full` and `index: union` add a full one per head). After (chunks): nothing of vocabulary size; a
  checkpoint keeps its inputs, views of h^0 and h^k, alive anyway.
* peak. Before, the forward also holds every depth's bf16 logits at once ((K+1) x 2.48 GB) and the KL's fp32
  copies of a depth's logits; after, only one chunk's tensors exist at a time (c = 1024 rows: an fp32 [c, V]
  tensor is 0.62 GB), during its forward or its recomputation and backward. Measured (CPU, bf16 autocast,
  N 10,000, d 64; peak RSS growth over the loss's forward and backward) at 1/16 of the rows (S 257, R = 512)
  and chunks of 1/8 of 1024 (128 rows): K = 1: 1.63 GB whole, 0.52 GB in chunks; K = 4: 3.98 GB whole, 1.16 GB
  in chunks. Whole logits grow with R and chunks with c, so at the paper's shape and 1024 rows: about 26 GB ->
  4.2 GB at K = 1, and 64 GB -> 9.3 GB at K = 4, on top of the model's own activations.

The price: one more lm_head forward per row and depth (2 d V flops), a third of the lm_head's forward and
backward; the same whichever the chunk size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch.utils.checkpoint import checkpoint

from ...train.losses import token_cross_entropy
from .losses import P2LossOutput, check_teachers, compose_teachers, depth_terms, p2_loss, scored, topn_index
from .settings import P2LossConfig

TERMS = ("ce", "kl", "agree", "acc")


def chunk_positions(chunk_rows: int | None, batch: int, targets: int) -> int:
    """Target positions of each window per chunk: ⌊chunk_rows / B⌋ (at least 1); all `targets` when null."""
    return targets if chunk_rows is None else min(targets, max(1, int(chunk_rows) // batch))


def p2_loss_hidden(
    project: Callable[[torch.Tensor], torch.Tensor],
    h0: torch.Tensor,
    hidden: Sequence[torch.Tensor],
    ids: torch.Tensor,
    cfg: P2LossConfig,
    step: int = 0,
    first_depth: int = 1,
) -> P2LossOutput:
    """`p2_loss` of the logits `project(h0)` [B, S, V] and `project(hidden[i])` (depth first_depth + i, [B, >=
    S-1-k, d]: its scored rows first), in chunks of `cfg.chunk_rows` rows (module docstring)."""
    b, s = ids.shape
    per = chunk_positions(cfg.chunk_rows, b, s - 1)
    if per >= s - 1:
        heads = [project(scored(h, k)) for k, h in enumerate(hidden, first_depth)]
        return p2_loss(project(h0), heads, ids, cfg, step, first_depth)
    depths = [k for k in range(first_depth, first_depth + len(hidden)) if s - 1 - k > 0]
    for k in depths:
        check_teachers(cfg, k, depths)
    alpha, beta = cfg.weights(step, first_depth - 1 + len(hidden))
    weights = _Weights(
        cfg.main_weight / (b * (s - 1)),
        {k: (alpha / (b * (s - 1 - k)), beta / (b * (s - 1 - k))) for k in depths},
        beta,
    )
    states = {0: h0, **{k: hidden[k - first_depth] for k in depths}}
    parts, sums = [], {}
    for a in range(1, s, per):
        end = min(a + per, s)
        here = [k for k in depths if max(a, k + 1) < end]  # the depths with a target in t_a .. t_{end-1}
        rows = [states[0][:, a - 1 : end - 1]] + [states[k][:, max(a, k + 1) - 1 - k : end - 1 - k] for k in here]
        fn = partial(_chunk, project, ids[:, a:end], here, weights, cfg)
        if torch.is_grad_enabled():  # nothing random in a chunk: no RNG state to keep for its recomputation
            part, chunk_sums = checkpoint(fn, *rows, use_reentrant=False, preserve_rng_state=False)
        else:
            part, chunk_sums = fn(*rows)
        parts.append(part)
        for name, v in zip(_names(here), chunk_sums):
            sums[name] = sums.get(name, 0.0) + v
    rows_of = {"loss_main": b * (s - 1), **{f"{t}@{k}": b * (s - 1 - k) for k in depths for t in TERMS}}
    return P2LossOutput(torch.stack(parts).sum(), {name: sums[name] / rows_of[name] for name in _names(depths)})


def _names(depths: Sequence[int]) -> list[str]:
    """The sums a chunk returns, in order: the main CE, then each depth's CE, KL, agree and acc (`p2_loss`'s
    metric names)."""
    return ["loss_main"] + [f"{t}@{k}" for k in depths for t in TERMS]


@dataclass(frozen=True)
class _Weights:
    """What a chunk's sums are multiplied by: w_main / (main rows), per depth (α_k, β_k) / (its rows); β_k."""

    main: float
    depth: dict[int, tuple[float, float]]
    beta: float


def _chunk(
    project: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    depths: list[int],
    weights: _Weights,
    cfg: P2LossConfig,
    main_rows: torch.Tensor,
    *head_rows: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk: (its part of the loss, [its main CE sum, then per depth its CE, KL, agree, acc sums]). `targets`
    [B, n] are the chunk's target tokens; every depth's rows end at the chunk's last target, so that a depth with
    n_k rows reads its teachers, the main head's Top-N and its argmax in the last n_k rows of theirs."""
    main = project(main_rows)
    ce_main = token_cross_entropy(main, targets).sum()
    part = weights.main * ce_main
    logits = {0: main, **{k: project(h) for k, h in zip(depths, head_rows)}}
    idx = topn_index(main, cfg.topn) if cfg.teacher == "main" else None
    with torch.no_grad():
        main_pred = main.argmax(-1)
    out = [ce_main.detach()]
    for k in depths:
        n = logits[k].shape[1]
        teach = compose_teachers([logits[j][:, -n:] for j in ([0] if cfg.teacher == "main" else range(k))], cfg.teacher)
        top = None if idx is None else idx[:, -n:]
        ce, kl, agree, acc = depth_terms(
            logits[k], targets[:, -n:], teach, top, main_pred[:, -n:], cfg, weights.beta, torch.sum
        )
        w_ce, w_kl = weights.depth[k]
        part = part + w_ce * ce + (w_kl * kl if weights.beta > 0 else 0.0)
        out += [ce.detach(), kl.detach(), agree, acc]
    return part, torch.stack([t.double() for t in out])
