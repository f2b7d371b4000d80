"""Draft trees of paper 3 (training-free probing MTP): Top-K candidates per mask token, pruning, Top-1 expansion,
the dynamic tree within a block complexity, and fixed-branching trees for the ablation. Pure tensor functions.

Vocabulary used throughout (paper 3, Sections 3.3-3.5):

* m = `masks_per_step`: the number of mask tokens hung, as a causal chain, on a tree node; mask d (d = 1..m)
  predicts the token d+1 positions after that node, so m is also the draft depth ("the number of mask tokens
  (tree depth)", Section 3.4).
* The masks for the NEXT step must hang on every node that can become the last accepted node, i.e. on every
  node (root included). Block complexity BC = rows of the verification forward = nodes (root = last generated
  token included) + their masks = (N + 1)(1 + m) for N draft nodes (Section 3.3: "the number of draft-tree
  nodes plus their associated mask tokens", "accounting for one last-accepted token"). So BC 10/30/60 give
  N = 4/14/29 with one mask and N = 2/9/19 with two; `nodes_for_bc` rounds down when (1 + m) does not divide BC.
* Top-1 expansion (Section 3.4, Appendix D): only the best candidate of depth d gets children at depth d+1.
  A tree is then given by its counts per depth `(n_1, .., n_m)`; node order is depth 1 ranks 0..n_1-1, then
  the children of node 1, then those of the first depth-2 node, and so on.
* Dynamic tree (Section 3.4, Algorithm 1): every Top-1-expansion trajectory ending at depth d, rank j has the
  cumulative probability `prod_{e<d} p_e[0] * p_d[j]`; the N trajectories of highest cumulative probability
  within BC are kept ("more branches when the model is uncertain, fewer when it is confident"). Since a child's
  value never exceeds its parent's, the kept set is always a tree (ties go to the shallower, lower-rank slot).
  In a batch the tree structure is shared, so slots are ranked by the batch mean of their cumulative
  probabilities (exactly the paper's rule at batch 1); candidates stay per row.
* Fixed branching (Table 2 ablation): `branching = (k_1, .., k_m)` either with Top-1 expansion (`top1`: k_d
  children under the best depth-(d-1) node, the shape of the paper's block-complexity example) or fully expanded
  (`fixed`: every depth-(d-1) node gets k_d children, Medusa-style dense tree).
* Pruning (Section 3.5): a candidate equal to its parent, or to the last generated token (the root), is replaced
  by the next-best candidate of the same mask distribution (the candidate list is re-ranked without it).
  At depth 1 the parent is the root, so only the root is excluded there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from ...decoding.tree import TreeBuffers, tree_buffers_from_parents

EXPANSIONS = ("dynamic", "top1", "fixed")


def nodes_for_bc(bc: int, masks_per_step: int) -> int:
    """Draft nodes N (root excluded) of a tree whose nodes + masks fit block complexity `bc`: (N+1)(1+m) <= bc."""
    if masks_per_step < 1:
        raise ValueError(f"masks_per_step must be >= 1, got {masks_per_step}")
    n = bc // (1 + masks_per_step) - 1
    if n < 0:
        raise ValueError(f"bc={bc} cannot hold the root and its {masks_per_step} mask(s)")
    return n


def block_complexity(num_nodes: int, masks_per_step: int) -> int:
    """Rows of one verification forward: nodes (root included, `num_nodes`) plus m masks on each."""
    return num_nodes * (1 + masks_per_step)


def tree_nodes(branching: Sequence[int], expansion: str) -> int:
    """Draft nodes (root excluded) of a fixed-branching tree."""
    if expansion == "top1":
        return int(sum(branching))
    total, width = 0, 1
    for k in branching:
        width *= int(k)
        total += width
    return total


def pruned_topk(probs: torch.Tensor, k: int, exclude: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most probable tokens of `probs` [B, V] for each of P parents, skipping each parent's excluded tokens.

    `exclude` [B, P, X] (-1 = nothing) lists the tokens a parent may not take (pruning, Section 3.5); the
    next-best tokens take their places. Returns `(ids [B, P, k], probs [B, P, k])`, best first; P = 1 when
    `exclude` is None.
    """
    b, v = probs.shape
    x = 0 if exclude is None else exclude.shape[-1]
    pool_p, pool = probs.topk(min(k + x, v), dim=-1)  # [B, k+X]
    if exclude is None:
        return pool[:, None, :k], pool_p[:, None, :k]
    hit = (pool[:, None, :, None] == exclude[:, :, None, :]).any(-1)  # [B, P, k+X]
    j = torch.arange(pool.shape[1], device=pool.device)
    key = hit.long() * pool.shape[1] + j  # kept tokens first, each group in rank order
    order = key.argsort(dim=-1)[..., :k]
    p = exclude.shape[1]
    ids = pool[:, None, :].expand(b, p, -1).gather(2, order)
    pr = pool_p[:, None, :].expand(b, p, -1).gather(2, order)
    return ids, pr


@dataclass(frozen=True)
class ProbeCandidates:
    """Top-K candidate lists of the m mask distributions under Top-1 expansion (pruning already applied)."""

    ids: torch.Tensor  # [B, m, K] candidate tokens per depth, best first
    probs: torch.Tensor  # [B, m, K] their probabilities under the mask distribution

    def slot_values(self) -> torch.Tensor:
        """[B, m, K] cumulative probability of the Top-1-expansion trajectory ending at (depth d, rank j)."""
        top = self.probs[:, :, 0]
        prefix = torch.cat([torch.ones_like(top[:, :1]), top[:, :-1].cumprod(1)], dim=1)
        return prefix[:, :, None] * self.probs


def top1_candidates(mask_logits: torch.Tensor, root: torch.Tensor, k: int, prune: bool = True) -> ProbeCandidates:
    """Top-k candidates per depth from mask logits [B, m, V] for a Top-1-expansion tree under `root` [B].

    With `prune`, depth-1 candidates skip the root token, and depth-d candidates (d >= 2) skip their parent
    (the best depth-(d-1) candidate) and the root.
    """
    probs = mask_logits.float().softmax(-1)
    ids, prs = [], []
    parent = root
    for d in range(probs.shape[1]):
        excl = None
        if prune:
            excl = root[:, None, None] if d == 0 else torch.stack([parent, root], dim=1)[:, None, :]
        i, p = pruned_topk(probs[:, d], k, excl)
        ids.append(i[:, 0])
        prs.append(p[:, 0])
        parent = i[:, 0, 0]
    return ProbeCandidates(torch.stack(ids, 1), torch.stack(prs, 1))


def dynamic_counts(slot_values: torch.Tensor, n_nodes: int) -> tuple[int, ...]:
    """Counts per depth of the dynamic tree: the `n_nodes` slots of highest (batch-mean) cumulative probability.

    `slot_values` [B, m, K] (see `ProbeCandidates.slot_values`). Ties go to the shallower slot, then the lower
    rank (stable sort over the depth-major slot order). Trailing depths with no node are dropped.
    """
    _, m, k = slot_values.shape
    n = min(n_nodes, m * k)
    flat = slot_values.float().mean(0).reshape(-1)
    chosen = torch.sort(-flat, stable=True).indices[:n]
    counts = torch.bincount(torch.div(chosen, k, rounding_mode="floor"), minlength=m).tolist()
    while counts and counts[-1] == 0:
        counts.pop()
    for d in range(1, len(counts)):  # guaranteed by parent >= child, checked for safety (NaN inputs)
        if counts[d] and not counts[d - 1]:
            raise ValueError(f"dynamic tree: depth {d + 1} selected without depth {d}")
    return tuple(int(c) for c in counts)


@lru_cache(maxsize=512)
def top1_buffers(counts: tuple[int, ...]) -> TreeBuffers:
    """Buffers of the Top-1-expansion tree with `counts[d]` nodes at depth d+1 (children of the first node one
    depth up); `counts = ()` is the bare root."""
    parents, first = [-1], 0
    for c in counts:
        if c <= 0:
            raise ValueError(f"top-1 tree counts must be positive, got {counts}")
        start = len(parents)
        parents.extend([first] * c)
        first = start
    ranks = [0] + [j for c in counts for j in range(c)]
    return tree_buffers_from_parents(parents, ranks, topk=max([1, *counts]))


def top1_candidate_tokens(cands: ProbeCandidates, counts: Sequence[int]) -> torch.Tensor:
    """[B, N] candidate tokens of a Top-1-expansion tree, in `top1_buffers(counts)` node order."""
    parts = [cands.ids[:, d, :c] for d, c in enumerate(counts)]
    if not parts:
        return cands.ids.new_empty(cands.ids.shape[0], 0)
    return torch.cat(parts, dim=1)


@lru_cache(maxsize=128)
def fixed_buffers(branching: tuple[int, ...]) -> TreeBuffers:
    """Buffers of the fully expanded tree: every depth-d node has `branching[d]` children (node order by depth,
    then parent, then rank)."""
    parents, ranks, level = [-1], [0], [0]
    for k in branching:
        if k <= 0:
            raise ValueError(f"branching must be positive, got {branching}")
        nxt = []
        for p in level:
            for j in range(k):
                nxt.append(len(parents))
                parents.append(p)
                ranks.append(j)
        level = nxt
    return tree_buffers_from_parents(parents, ranks, topk=max([1, *branching]))


def fixed_candidate_tokens(
    mask_logits: torch.Tensor, root: torch.Tensor, branching: Sequence[int], prune: bool = True
) -> torch.Tensor:
    """[B, N] tokens of the fully expanded tree `fixed_buffers(branching)`: the children of a node at depth d are
    the top-k_{d+1} tokens of mask d+1 (pruned per parent: not the parent's token, not the root)."""
    probs = mask_logits.float().softmax(-1)
    b = probs.shape[0]
    out, parent_tok = [], root[:, None]  # [B, P] tokens of the current level's nodes
    for d, k in enumerate(branching):
        excl = torch.stack([parent_tok, root[:, None].expand_as(parent_tok)], dim=-1) if prune else None
        if excl is None:
            ids, _ = pruned_topk(probs[:, d], k)
            ids = ids.expand(b, parent_tok.shape[1], k)
        else:
            ids, _ = pruned_topk(probs[:, d], k, excl)
        level = ids.reshape(b, -1)  # children grouped by parent, parents in node order
        out.append(level)
        parent_tok = level
    return torch.cat(out, dim=1) if out else root.new_empty(b, 0)


def mask_chain_parents(num_nodes: int, masks_per_step: int) -> torch.Tensor:
    """`extra_parents` hanging a chain of m masks on every tree node: extra row `i*m + j` is mask j+1 of node i,
    whose parent is node i (j = 0) or the previous mask of the chain (chunk row `num_nodes + i*m + j - 1`)."""
    m = masks_per_step
    i = torch.arange(num_nodes).repeat_interleave(m)
    j = torch.arange(m).repeat(num_nodes)
    return torch.where(j == 0, i, num_nodes + i * m + j - 1)


def anchored_mask_logits(extra_logits: torch.Tensor, last_node: torch.Tensor, masks_per_step: int) -> torch.Tensor:
    """[B, m, V] logits of the mask chain hung on each row's last accepted node (layout of `mask_chain_parents`)."""
    m = masks_per_step
    rows = last_node.to(extra_logits.device)[:, None] * m + torch.arange(m, device=extra_logits.device)[None]
    return extra_logits.gather(1, rows[:, :, None].expand(-1, -1, extra_logits.shape[-1]))
