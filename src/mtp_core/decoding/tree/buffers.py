"""Tree buffers for tree verification (Medusa `generate_medusa_buffers` semantics, any valid tree).

A draft tree is given as a list of paths in Medusa's "choices" format: each path is a tuple of child ranks per
depth, e.g. `[(0,), (1,), (0, 0), (0, 1)]`; entry d of a path is the top-k rank of the depth-(d+1) draft. Node 0
is the root (the last accepted token); the other nodes are the paths sorted by `(len, lexicographic)`, so a
node's parent and all its ancestors come before it. From this, `tree_buffers` builds (Medusa, FasterDecoding/
Medusa `medusa/model/utils.py::generate_medusa_buffers`):

* `attn_mask` [N, N] bool: each node sees its ancestors (root included) and itself;
* `position_ids` [N]: the depth (root 0), offset by the prefix length at decode time;
* `tree_indices` [N]: where each node takes its token from the flattened candidates
  `cat([root], topk(depth 1), topk(depth 2), ...)`, i.e. `1 + topk * (depth - 1) + rank` (root 0);
* `retrieve_indices` [n_leaves, max_depth + 1]: per leaf, the nodes from root to leaf, padded with -1; leaves in
  Medusa's order (walking the sorted paths from the end).

For the worked example of the reference (`[[0], [0, 0], [1], [0, 1]]`) this gives mask rows
`[1,0,0,0,0] [1,1,0,0,0] [1,0,1,0,0] [1,1,0,1,0] [1,1,0,0,1]`, `tree_indices = [0,1,2,11,12]`,
`position_ids = [0,1,1,2,2]` and `retrieve_indices = [[0,1,4],[0,1,3],[0,2,-1]]`.

`ancestor_mask` and `chunk_attention_mask` are the generic pieces the verification forward uses for any chunk
whose rows form a forest given by parent pointers (tree nodes, extra probing positions, padding rows).

The published trees (Medusa's and Hydra's default `mc_sim_7b_63`, Hydra's `single`) are in `decoding.tree.published`.
`TreeBuffers.levels` lists, per depth, the parents that have
children and each child's parent and rank: what a drafter that conditions on the parent's path (Hydra's grounded
heads) expands depth by depth; `hydra_extras` gives Hydra's `generate_hydra_buffers` extras from them (parity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import torch

from .published import MEDUSA_TOPK


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """[n, n] bool: row i is True at i and at every ancestor of i.

    `parents[i]` is the parent row of i (-1 for a root) and must be smaller than i. Computed by transitive
    closure with repeated squaring (log2(depth) boolean matrix products).
    """
    parents = torch.as_tensor(parents, dtype=torch.long)
    n = parents.numel()
    idx = torch.arange(n)
    if bool((parents >= idx).any()) or bool((parents < -1).any()):
        raise ValueError("parents must satisfy -1 <= parents[i] < i (parents before children)")
    anc = torch.eye(n, dtype=torch.bool)
    has = parents >= 0
    anc[idx[has], parents[has]] = True
    while True:
        a = anc.to(torch.float32)
        nxt = (a @ a) > 0
        if torch.equal(nxt, anc):
            return anc
        anc = nxt


def _sibling_ranks(parents: torch.Tensor) -> torch.Tensor:
    """Rank of each node among its siblings, in node order (root-level nodes ranked among themselves)."""
    n = parents.numel()
    same = parents[None, :] == parents[:, None]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)
    return (same & earlier).sum(1)


@dataclass(frozen=True)
class TreeBuffers:
    """Static description of one draft tree; see the module docstring. N = number of nodes incl. the root."""

    paths: tuple[tuple[int, ...], ...]  # the non-root nodes' choice paths, in node order (node i+1 = paths[i])
    parents: torch.Tensor  # [N] long, parent node of each node, -1 for the root
    ranks: torch.Tensor  # [N] long, child rank of each node at its depth (root 0)
    attn_mask: torch.Tensor  # [N, N] bool, node sees ancestors and itself
    position_ids: torch.Tensor  # [N] long, depth of each node (root 0)
    tree_indices: torch.Tensor  # [N] long, index into cat([root], topk(d1), topk(d2), ...)
    retrieve_indices: torch.Tensor  # [n_leaves, max_depth+1] long, root..leaf node ids, -1 padded
    node_paths: torch.Tensor  # [N, max_depth+1] long, root..node node ids for every node, -1 padded
    topk: int

    @property
    def num_nodes(self) -> int:
        return int(self.parents.numel())

    @property
    def max_depth(self) -> int:
        return int(self.node_paths.shape[1]) - 1

    @property
    def depth(self) -> torch.Tensor:
        return self.position_ids

    def medusa_attn_mask(self) -> torch.Tensor:
        """The mask in Medusa's layout: float [1, 1, N, N] of 0/1."""
        return self.attn_mask.to(torch.float32)[None, None]

    @cached_property
    def levels(self) -> tuple[DepthLevel, ...]:
        """Per depth d = 1 .. max_depth, the expansion from depth d - 1 (computed once per tree)."""
        depth, out = self.position_ids, []
        for d in range(1, self.max_depth + 1):
            children = torch.nonzero(depth == d).flatten()
            parent_of = self.parents[children]
            parents = torch.unique(parent_of)  # sorted: node order
            row = torch.searchsorted(parents, parent_of)
            out.append(DepthLevel(parents, children, row, self.ranks[children], int(self.ranks[children].max()) + 1))
        return tuple(out)

    @cached_property
    def chunk_layouts(self) -> dict[Any, Any]:
        """Cache of the verification chunk layouts of this tree (`decoding.tree`), so that switching between
        the trees of a bank recomputes nothing."""
        return {}


@dataclass(frozen=True)
class DepthLevel:
    """How depth d of a tree grows from depth d - 1: `parents` [P] the node ids at depth d - 1 that have children
    (node order), `children` [C] the node ids at depth d, `parent_row` [C] the index of each child's parent in
    `parents`, `ranks` [C] each child's rank, `k` = max rank + 1 (the top-k a drafter must read)."""

    parents: torch.Tensor
    children: torch.Tensor
    parent_row: torch.Tensor
    ranks: torch.Tensor
    k: int


def _buffers_from_parents(
    parents: torch.Tensor, ranks: torch.Tensor, topk: int, paths: tuple[tuple[int, ...], ...] | None
) -> TreeBuffers:
    n = parents.numel()
    anc = ancestor_mask(parents)
    depth = anc.sum(1) - 1
    max_depth = int(depth.max())
    # root..node ids: ancestors have smaller ids than their descendants, so sorting the ids gives path order
    ids = torch.where(anc, torch.arange(n), torch.full((n, n), n)).sort(dim=1).values[:, : max_depth + 1]
    node_paths = ids.masked_fill(ids == n, -1)
    tree_indices = torch.where(depth == 0, 0, 1 + topk * (depth - 1) + ranks)
    has_child = (anc & ~torch.eye(n, dtype=torch.bool)).any(0)
    leaves = torch.nonzero(~has_child).flatten().flip(0)  # Medusa walks the sorted paths from the end
    if paths is None:
        r = ranks.tolist()
        rows = zip(node_paths.tolist(), depth.tolist())
        paths = tuple(tuple(r[j] for j in row[1 : d + 1]) for row, d in rows)[1:]
    return TreeBuffers(
        paths=paths,
        parents=parents,
        ranks=ranks,
        attn_mask=anc,
        position_ids=depth,
        tree_indices=tree_indices,
        retrieve_indices=node_paths[leaves],
        node_paths=node_paths,
        topk=topk,
    )


def tree_buffers(choices: Sequence[Sequence[int]], topk: int = MEDUSA_TOPK) -> TreeBuffers:
    """Buffers of the tree given by Medusa-style `choices` (any order; every prefix of a path must be present).

    Raises ValueError naming the offending path for duplicates, missing prefixes, or ranks outside [0, topk).
    """
    paths = [tuple(int(c) for c in p) for p in choices]
    if len(set(paths)) != len(paths):
        dup = next(p for p in paths if paths.count(p) > 1)
        raise ValueError(f"tree choices: duplicate path {list(dup)}")
    known = set(paths)
    for p in paths:
        if not p:
            raise ValueError("tree choices: empty path (the root is implicit)")
        if any(c < 0 or c >= topk for c in p):
            raise ValueError(f"tree choices: path {list(p)} has a rank outside [0, {topk})")
        if len(p) > 1 and p[:-1] not in known:
            raise ValueError(f"tree choices: path {list(p)} lacks its parent {list(p[:-1])}")
    ordered = tuple(sorted(paths, key=lambda p: (len(p), p)))
    node_of = {p: i + 1 for i, p in enumerate(ordered)}
    parents = torch.tensor([-1] + [node_of.get(p[:-1], 0) for p in ordered], dtype=torch.long)
    ranks = torch.tensor([0] + [p[-1] for p in ordered], dtype=torch.long)
    return _buffers_from_parents(parents, ranks, topk, ordered)


def tree_buffers_from_parents(
    parents: Sequence[int] | torch.Tensor,
    ranks: Sequence[int] | torch.Tensor | None = None,
    topk: int = MEDUSA_TOPK,
) -> TreeBuffers:
    """Buffers of a tree given by parent pointers (node 0 = root with parent -1, parents before children).

    For dynamic trees (P3's probing tree, EntMTP) built node by node. `ranks` default to the order among
    siblings. Node order is kept as given (it need not be Medusa's sorted order).
    """
    parents = torch.as_tensor(parents, dtype=torch.long)
    if parents.numel() == 0 or int(parents[0]) != -1 or bool((parents[1:] < 0).any()):
        raise ValueError("tree parents: node 0 must be the only root (parent -1)")
    ranks = _sibling_ranks(parents) if ranks is None else torch.as_tensor(ranks, dtype=torch.long)
    ranks = ranks.clone()
    ranks[0] = 0
    return _buffers_from_parents(parents, ranks, topk, None)


@lru_cache(maxsize=64)
def chain_buffers(length: int) -> TreeBuffers:
    """A single path of `length` drafts (the top-1 chain `[(0,), (0, 0), ...]`); `length` 0 is the bare root."""
    if length < 0:
        raise ValueError(f"chain length must be >= 0, got {length}")
    if length == 0:
        return tree_buffers_from_parents([-1])
    return tree_buffers([(0,) * d for d in range(1, length + 1)])


def candidates_from_topk(topk_ids: torch.Tensor, buffers: TreeBuffers) -> torch.Tensor:
    """Per-node draft tokens [B, N-1] from per-depth top-k ids [B, max_depth, topk] (Medusa `tree_indices`)."""
    b, d, k = topk_ids.shape
    if k != buffers.topk or d < buffers.max_depth:
        raise ValueError(
            f"top-k ids of shape {tuple(topk_ids.shape)} do not fit a tree of depth "
            f"{buffers.max_depth} with topk {buffers.topk}"
        )
    flat = topk_ids.reshape(b, d * k)
    return flat[:, buffers.tree_indices[1:].to(flat.device) - 1]


def chunk_attention_mask(
    kv_mask: torch.Tensor, chunk_mask: torch.Tensor, float_dtype: torch.dtype | None = None, slots: int | None = None
) -> torch.Tensor:
    """The 4D mask [B, 1, n, L + n] of a chunk of n rows on top of L cached positions.

    `kv_mask` [B, L] says which cached positions each row may see (False for left padding and for holes left
    by rejected tree branches); `chunk_mask` [n, n] is the chunk's own visibility (`ancestor_mask`). Returns a
    bool mask (True = attend; what sdpa takes) or, with `float_dtype`, the additive 0 / finfo.min form that eager
    attention needs. `slots`: the key axis padded to that many (a static cache's length), the slots past the
    chunk hidden.
    """
    b, n = kv_mask.shape[0], chunk_mask.shape[0]
    chunk = chunk_mask.to(kv_mask.device)[None].expand(b, n, n)
    mask = torch.cat([kv_mask.bool()[:, None, :].expand(b, n, kv_mask.shape[1]), chunk], dim=2)[:, None]
    if slots is not None:
        mask = torch.nn.functional.pad(mask, (0, slots - mask.shape[-1]), value=False)
    if float_dtype is None:
        return mask
    return torch.zeros(mask.shape, dtype=float_dtype, device=mask.device).masked_fill(
        ~mask, torch.finfo(float_dtype).min
    )


def hydra_extras(buffers: TreeBuffers) -> dict[str, list]:
    """Hydra's extras of `generate_hydra_buffers` (zankner/Hydra `hydra/model/utils.py`), for parity checks:
    `max_accepts` (per retrieve row, the depth of its leaf), `beam_sizes` (per depth, the most children a parent
    has), `children_per_head` (per depth d = 0 .. D-1, the child counts of the depth-d nodes that have children,
    in node order) and `children_to_expand_per_head` (for the same parents, how many of their children have
    children themselves)."""
    has_child = torch.zeros(buffers.num_nodes, dtype=torch.bool)
    has_child[buffers.parents[1:]] = True
    per_head, expand = [], []
    for level in buffers.levels:
        counts = torch.bincount(level.parent_row, minlength=level.parents.numel())
        grand = torch.bincount(level.parent_row, weights=has_child[level.children].double(), minlength=counts.numel())
        per_head.append(counts.tolist())
        expand.append(grand.long().tolist())
    return {
        "max_accepts": ((buffers.retrieve_indices >= 0).sum(1) - 1).tolist(),
        "beam_sizes": [max(c) for c in per_head],
        "children_per_head": per_head,
        "children_to_expand_per_head": expand,
    }
