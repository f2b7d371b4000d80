"""Drafting a tree with Medusa or Hydra heads (paper 5 §2.3-2.4; Medusa `generate_candidates`, Hydra
`_grounded_proposal`), and the heads' greedy chain that the scheduler's score reads (§4).

* **Medusa**: every head reads h_t (the trunk's hidden state at the last accepted node); the node at depth d with
  rank r gets head (d-1)'s rank-r token, the same token under every parent (Medusa's Cartesian `tree_indices`).
* **Hydra** (grounded): depth by depth, head (d-1) runs once per parent at depth d-1 that has children, on
  cat(e_t, E(root), E(drafts on the parent's path)); the parent's children take its top-k tokens by rank.
  Children are mapped to their parents by node id (`TreeBuffers.levels`), so any valid tree is drafted under
  the right parent; the reference code assumes each parent's children are contiguous ranks and that the
  children with descendants are a rank prefix, and drafts under the wrong parent otherwise (anchors (b)).
* **Prefix layer** (Hydra++): its cache mirrors the trunk's slot for slot (the same `kv_mask`, holes and
  left padding included): after the prefill it holds the prompt's hidden states; after each verification the
  hidden states of the root and the accepted drafts (the `max(accepted) + 1` slots the tree core keeps per row).
  e_t is its output at the last accepted node, the position whose output is the next root.
* **Greedy chain**: head d on the root and the chain's own top-1 drafts (not the true tokens); its top-1
  probabilities p_1 .. p_D give the path values. A level of the tree whose only parent is the chain's node
  reuses the chain's head call (a small tree often is the chain: the fresh score then costs nothing extra).
  `stale_chain` is what the tree's own head calls saw of the chain (the public code's one-step-stale signal).

Ranks and probabilities are over the heads' draft vocabulary. Where the trunk runs compiled (`backend: compiled`),
every head call runs compiled too (`StaticSession.call`: a graph per head and shape), in the CUDA-graph step of the
verification whose hidden states it reads; the prefix layer stays eager (its cache grows every step).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch

from ...decoding.batch import positions_from_mask
from ...decoding.cache import select_rows
from ...decoding.static import StaticSession
from ...decoding.tree import TreeBuffers, TreeState, chunk_attention_mask
from ...models.heads.hydra import HydraHeads
from ...models.heads.medusa import MedusaHeads


@lru_cache(maxsize=256)
def chain_nodes(paths: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """Node ids of the rank-0 chain (0,), (0, 0), .. as far as the tree has it (root excluded)."""
    index = {p: i + 1 for i, p in enumerate(paths)}
    out, d = [], 1
    while (0,) * d in index:
        out.append(index[(0,) * d])
        d += 1
    return tuple(out)


def _top1(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.float(), dim=-1).max(-1).values


def _heads_call(session: StaticSession | None, fn: Callable[..., torch.Tensor], key: tuple, *args) -> torch.Tensor:
    """`fn(*args)`; compiled on the trunk's static session when it has one (module docstring)."""
    return fn(*args) if session is None else session.call(fn, key, *args)


def _hydra_head(heads: HydraHeads, head: int, e: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Hydra head `head` from e_t [B, H] on path tokens [B, P, head + 1] -> [B, P, V']."""
    b, p = tokens.shape[:2]
    return heads.head_logits(head, e[:, None].expand(b, p, -1), heads.embed(tokens))


class MedusaStep:
    """One step's Medusa head calls on h_t [B, H], computed lazily up to the deepest head needed."""

    def __init__(self, heads: MedusaHeads, h: torch.Tensor, session: StaticSession | None = None):
        self.heads, self.h, self.session = heads, h, session
        self.logits: list[torch.Tensor] = []  # per head [B, V']

    def _upto(self, depth: int) -> None:
        if depth > self.heads.num_heads:
            raise ValueError(f"depth {depth} needs {depth} Medusa heads, these have {self.heads.num_heads}")
        for j in range(len(self.logits), depth):
            key = ("medusa-head", j, tuple(self.h.shape))
            self.logits.append(_heads_call(self.session, self.heads.head_logits, key, self.h, j))

    def chain(self, depth: int) -> np.ndarray:
        """[B, depth] top-1 probabilities of heads 0 .. depth-1."""
        self._upto(depth)
        return torch.stack([_top1(x) for x in self.logits[:depth]], dim=1).cpu().numpy()

    def propose(self, buffers: TreeBuffers) -> torch.Tensor:
        b = self.h.shape[0]
        tok = torch.zeros(b, buffers.num_nodes, dtype=torch.long, device=self.h.device)
        self._upto(buffers.max_depth)
        for d, lv in enumerate(buffers.levels, start=1):
            ids = self.logits[d - 1].topk(lv.k, dim=-1).indices  # [B, k]
            tok[:, lv.children] = self.heads.out.token_ids(ids[:, lv.ranks])
        return tok[:, 1:]

    def stale_chain(self, buffers: TreeBuffers) -> np.ndarray:
        return self.chain(buffers.max_depth)


class HydraStep:
    """One step's Hydra head calls from e_t [B, H] and the root [B] (module docstring)."""

    def __init__(self, heads: HydraHeads, e: torch.Tensor, root: torch.Tensor, session: StaticSession | None = None):
        self.heads, self.e, self.session = heads, e, session
        self.chain_tokens = root[:, None]  # [B, 1 + d]: root then the chain's drafts
        self.chain_logits: list[torch.Tensor] = []  # per depth [B, V']
        self.level_top1: list[torch.Tensor | None] = []  # the tree's own calls at the chain's parents

    def _call(self, head: int, tokens: torch.Tensor) -> torch.Tensor:
        """Head `head` on path tokens [B, P, head + 1] -> [B, P, V']."""
        key = ("hydra-head", head, tuple(tokens.shape))
        return _heads_call(self.session, _hydra_head, key, self.heads, head, self.e, tokens)

    def chain(self, depth: int) -> np.ndarray:
        """[B, depth] top-1 probabilities along the heads' greedy chain."""
        if depth > self.heads.num_heads:
            raise ValueError(f"depth {depth} needs {depth} Hydra heads, these have {self.heads.num_heads}")
        for d in range(len(self.chain_logits), depth):
            logits = self._call(d, self.chain_tokens[:, None])[:, 0]
            self.chain_logits.append(logits)
            nxt = self.heads.out.token_ids(logits.argmax(-1))
            self.chain_tokens = torch.cat([self.chain_tokens, nxt[:, None]], dim=1)
        return torch.stack([_top1(x) for x in self.chain_logits[:depth]], dim=1).cpu().numpy()

    def propose(self, buffers: TreeBuffers) -> torch.Tensor:
        b = self.e.shape[0]
        tok = torch.zeros(b, buffers.num_nodes, dtype=torch.long, device=self.e.device)
        tok[:, 0] = self.chain_tokens[:, 0]
        chain = (0, *chain_nodes(buffers.paths))
        self.level_top1 = []
        for d, lv in enumerate(buffers.levels, start=1):
            anchor = chain[d - 1] if d - 1 < len(chain) else -1  # the chain's node at depth d-1, if in the tree
            if lv.parents.numel() == 1 and int(lv.parents[0]) == anchor and len(self.chain_logits) >= d:
                logits = self.chain_logits[d - 1][:, None]  # the chain's own call
            else:
                paths = buffers.node_paths[lv.parents, :d]  # [P, d]: root .. parent
                logits = self._call(d - 1, tok[:, paths])
            at_chain = (lv.parents == anchor).nonzero()
            self.level_top1.append(_top1(logits[:, int(at_chain[0])]) if len(at_chain) else None)
            ids = logits.topk(lv.k, dim=-1).indices  # [B, P, k]
            tok[:, lv.children] = self.heads.out.token_ids(ids[:, lv.parent_row, lv.ranks])
        return tok[:, 1:]

    def stale_chain(self, buffers: TreeBuffers) -> np.ndarray:
        """The chain's top-1 probabilities the last `propose` computed, as deep as its tree follows the chain."""
        out = []
        for p in self.level_top1:
            if p is None:
                break
            out.append(p)
        return torch.stack(out, dim=1).cpu().numpy() if out else np.zeros((self.e.shape[0], 0))


class PrefixState:
    """The prefix layer's cache and e_t per live row; pruned with the rows (`TreeState.data`)."""

    def __init__(self, cache, e: torch.Tensor):
        self.cache, self.e = cache, e

    def select(self, keep: torch.Tensor) -> None:
        if self.cache is not None:
            select_rows(self.cache, keep.to(self.e.device))
        self.e = self.e[keep.to(self.e.device)]


def _causal(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


class Drafter:
    """Per-generation drafting state of one kind of heads: `begin` after the prefill, `advance` after each
    verification, `step` for the next draft."""

    KEY = "heads_draft"

    def __init__(self, heads: MedusaHeads | HydraHeads):
        self.heads = heads
        self.hydra = isinstance(heads, HydraHeads)
        self.needs_prompt_hidden = self.hydra and heads.prefix is not None

    def begin(self, state: TreeState) -> None:
        if not self.hydra:
            return
        if not self.needs_prompt_hidden:
            state.data[self.KEY] = PrefixState(None, state.last_hidden)
            return
        h, kv = state.prompt_hidden, state.ctx.kv_mask
        n = h.shape[1]
        mask = (_causal(n, h.device)[None] & kv[:, None, :]) | torch.eye(n, dtype=torch.bool, device=h.device)
        cache = self.heads.new_prefix_cache()
        e = self.heads.prefix_forward(h, positions_from_mask(kv.long()), mask[:, None], cache)
        state.data[self.KEY] = PrefixState(cache, e[:, -1])

    def advance(self, state: TreeState) -> None:
        """Fold the last verification's accepted positions into the prefix state."""
        last = state.last
        if not self.hydra or last is None:
            return
        ps: PrefixState = state.data[self.KEY]
        rows = torch.arange(last.num_accepted.shape[0], device=last.num_accepted.device)
        if ps.cache is None:
            ps.e = last.hidden[rows, last.num_accepted]
            return
        ctx = state.ctx
        # the slots the trunk kept: max(accepted) + 1 over the rows of that step, some of which may have been
        # pruned since (finished), so the count comes from the caches, not from the live rows
        before = ps.cache.get_seq_length()
        m = ctx.kv_mask.shape[1] - before
        if not 0 < m <= last.hidden.shape[1] or m <= int(last.num_accepted.max()):
            raise RuntimeError(f"prefix cache holds {before} slots, the trunk {ctx.kv_mask.shape[1]}: out of step")
        start = ctx.root_pos - last.num_accepted - 1  # the previous root's position
        pos = start[:, None] + torch.arange(m, device=start.device)[None]
        mask = chunk_attention_mask(ctx.kv_mask[:, :before], _causal(m, ctx.kv_mask.device))
        e = self.heads.prefix_forward(last.hidden[:, :m], pos, mask, ps.cache)
        ps.e = e[rows, last.num_accepted]

    def step(self, state: TreeState) -> MedusaStep | HydraStep:
        if self.hydra:
            return HydraStep(self.heads, state.data[self.KEY].e, state.ctx.root, state.ctx.session)
        return MedusaStep(self.heads, state.last_hidden, state.ctx.session)
