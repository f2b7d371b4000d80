"""The state objects of tree decoding (`decoding.tree`): the verified batch (`TreeContext`), one verification's
outcome (`TreeVerifyResult`), a drafter's proposal (`Draft`) and everything a drafter sees (`TreeState`); each
keeps only the live rows when finished rows are pruned (`select`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch
from transformers import DynamicCache

from ..cache import select_rows
from .buffers import TreeBuffers, chain_buffers


def _select(obj: Any, rows: torch.Tensor) -> None:
    """Keep batch rows `rows` of every batch-first tensor / list field of a dataclass, in place."""
    idx = rows.tolist()
    for f in fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            setattr(obj, f.name, v[rows.to(v.device)])
        elif isinstance(v, list):
            setattr(obj, f.name, [v[i] for i in idx])


@dataclass
class TreeContext:
    """The verified state of a batch: the cache holds every emitted token except `root` (the last one)."""

    cache: DynamicCache  # (a StaticCache: `session`'s)
    kv_mask: torch.Tensor  # [B, L] bool: which cached slots each row may attend to
    root: torch.Tensor  # [B] long: last emitted token, fed as node 0 of the next chunk
    root_pos: torch.Tensor  # [B] long: its position id
    session: Any = None  # `decoding.static.StaticSession` (backend compiled): forwards run compiled on its cache

    @property
    def batch_size(self) -> int:
        return int(self.root.shape[0])

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (cache included)."""
        rows = rows.to(self.root.device)
        select_rows(self.cache, rows)
        self.kv_mask, self.root, self.root_pos = self.kv_mask[rows], self.root[rows], self.root_pos[rows]


@dataclass
class TreeVerifyResult:
    """Outcome of one verification step. D = tree depth; path entries past `num_accepted` are padding."""

    tokens: torch.Tensor  # [B, D+1] emitted tokens: accepted drafts then the bonus token, -1 padded
    num_accepted: torch.Tensor  # [B] accepted drafts (bonus excluded); the row emits num_accepted + 1 tokens
    path: torch.Tensor  # [B, D+1] chunk rows of root + accepted nodes, -1 padded
    last_node: torch.Tensor  # [B] deepest accepted node (where the bonus token was predicted)
    node_argmax: torch.Tensor  # [B, N] the model's argmax at every tree node
    last_logits: torch.Tensor  # [B, V] logits at last_node (they produced the bonus token)
    logits: torch.Tensor | None = None  # [B, D+1, V] at the path nodes (return_logits)
    hidden: torch.Tensor | None = None  # [B, D+1, H] final (post-norm, lm_head input) hidden states at the path
    #                                     nodes (return_hidden)
    extra_logits: torch.Tensor | None = None  # [B, E, V] at the extra rows
    extra_hidden: torch.Tensor | None = None  # [B, E, H] (return_hidden)
    node_ok: torch.Tensor | None = None  # [B, N] bool: each node's token passes the acceptance rule at its parent
    #                                      (whether or not `allowed`: the what-if of nodes that may not be accepted)
    chunk_rows: int = 0  # rows the forward ran (root, nodes, extra rows, padding)

    def emitted(self) -> list[list[int]]:
        """Per row, the tokens this step emitted (accepted drafts then bonus)."""
        n = (self.num_accepted + 1).tolist()
        return [row[:k] for row, k in zip(self.tokens.tolist(), n)]

    def select(self, rows: torch.Tensor) -> None:
        _select(self, rows)


@dataclass
class Draft:
    """What a drafter proposes for one step: a tree, its tokens per non-root node, optional extra rows."""

    buffers: TreeBuffers
    candidates: torch.Tensor  # [B, N-1] long, -1 = no candidate
    extra_parents: torch.Tensor | None = None  # [E] long, see the module docstring
    extra_embeds: torch.Tensor | None = None  # [B, E, H]
    allowed: torch.Tensor | None = None  # [N] bool: nodes that may be accepted (None: all; see `verify_tree`)

    @classmethod
    def empty(cls, batch: int, device: torch.device | str) -> Draft:
        """The draft of a plain greedy step: the root alone, no candidates."""
        return cls(chain_buffers(0), torch.empty(batch, 0, dtype=torch.long, device=device))


@dataclass
class TreeState:
    """Everything a drafter sees; batch rows are the live rows (finished rows are pruned from every field), unless the
    batch keeps its shape (`backend: compiled`, `prune_finished: false`): finished rows then stay, marked in
    `finished`, and a drafter leaves them out of what it decides for the batch (`live`; `remaining` is 0 there)."""

    ctx: TreeContext
    rows: torch.Tensor  # [B] original prompt index of each live row
    history: list[list[int]]  # per row: prompt + emitted tokens; the last one is ctx.root
    prompt_lens: list[int]
    max_new_tokens: int
    last_logits: torch.Tensor  # [B, V] logits that produced ctx.root
    last_hidden: torch.Tensor | None = None  # [B, H] hidden state there (decoders with needs_hidden)
    last: TreeVerifyResult | None = None  # the previous verification (None right after the prefill)
    prefill_extra_logits: torch.Tensor | None = None  # [B, E, V] logits of extra rows appended to the prompt
    prompt_hidden: torch.Tensor | None = None  # [B, L, H] post-norm hidden states of the (left-padded) prompt
    #                                            (decoders with needs_prompt_hidden; a drafter may drop it)
    step: int = 0  # forwards so far, the prefill included
    finished: list[bool] = field(default_factory=list)  # per row: stopped (kept only in a batch that keeps its shape)
    data: dict[str, Any] = field(default_factory=dict)  # drafter state; batch-first tensors, lists and objects
    #                                                     with a `select(rows)` method are pruned with the rows

    def live(self) -> list[bool]:
        """Per row: still decoding."""
        return [not f for f in self.finished] if self.finished else [True] * len(self.history)

    def remaining(self) -> list[int]:
        """Tokens each row may still emit (0 for a finished row)."""
        budget = (self.max_new_tokens - (len(h) - p) for h, p in zip(self.history, self.prompt_lens))
        return [b if live else 0 for b, live in zip(budget, self.live())]

    def select(self, keep: torch.Tensor) -> None:
        self.ctx.select(keep)
        self.rows = self.rows[keep]
        idx = keep.tolist()
        self.history = [self.history[i] for i in idx]
        self.prompt_lens = [self.prompt_lens[i] for i in idx]
        self.finished = [self.finished[i] for i in idx] if self.finished else []
        dev = self.last_logits.device
        self.last_logits = self.last_logits[keep.to(dev)]
        if self.last_hidden is not None:
            self.last_hidden = self.last_hidden[keep.to(dev)]
        if self.last is not None:
            self.last.select(keep)
        if self.prefill_extra_logits is not None:
            self.prefill_extra_logits = self.prefill_extra_logits[keep.to(dev)]
        if self.prompt_hidden is not None:
            self.prompt_hidden = self.prompt_hidden[keep.to(self.prompt_hidden.device)]
        for k, v in self.data.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                self.data[k] = v[keep.to(v.device)]
            elif isinstance(v, list):
                self.data[k] = [v[i] for i in idx]
            elif callable(getattr(v, "select", None)):  # drafter state with its own rows (e.g. head caches)
                v.select(keep)
