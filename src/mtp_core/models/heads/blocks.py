"""Pieces the Medusa and Hydra heads share: the residual block and the output projection over a draft vocabulary.

* `ResBlock(x) = x + SiLU(W x + b)` with W zero-initialised, so a block starts as the identity (Medusa
  `medusa_model.py::ResBlock`; Hydra's plain block). Hydra's first block of each head maps a wider input:
  `CondResBlock(x) = R x + SiLU(W x + b)` with `R: Linear(in, H)` (Hydra `prefix_mlp_head.py`, `res_connection`).
* `DraftVocab`: each head's logits over the draft vocabulary V' (the `draft_vocab` most frequent tokens of the
  heads' training data, ids in the buffer `vocab_ids`; None = the whole vocabulary). `lm_head: shared` reads
  the trunk's frozen output head (restricted to V' once, at `bind`), as the legacy Medusa heads and Medusa-2 do;
  `own` gives every head its own `Linear(H, V')` (the published Medusa-1 and Hydra checkpoints; Hydra's has a
  bias), initialised from the trunk's head. Drafting over V' keeps decoding lossless (the trunk verifies every
  token) and cuts the projection the heads pay per call by V / V' (6x for SmolLM2 with V' = 8192).
"""

from __future__ import annotations

import torch
from torch import nn


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


class CondResBlock(nn.Module):
    """Hydra's first block of head i: input width `in_features` = H * (i + 2), output H."""

    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)
        nn.init.zeros_(self.linear.weight)
        self.res = nn.Linear(in_features, hidden)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res(x) + self.act(self.linear(x))


class DraftVocab(nn.Module):
    """Logits of `num_heads` heads over the draft vocabulary (module docstring)."""

    def __init__(self, hidden: int, vocab: int, num_heads: int, draft_vocab: int | None, own: bool, bias: bool):
        super().__init__()
        if draft_vocab is not None and not 0 < draft_vocab <= vocab:
            raise ValueError(f"draft_vocab {draft_vocab} must be in [1, vocab size {vocab}]")
        self.vocab, self.size = vocab, draft_vocab or vocab
        if draft_vocab is not None:
            self.register_buffer("vocab_ids", torch.arange(draft_vocab))
        else:
            self.vocab_ids = None
        self.own = nn.ModuleList(nn.Linear(hidden, self.size, bias=bias) for _ in range(num_heads)) if own else None
        self._shared: torch.Tensor | None = None

    def set_vocab(self, ids: torch.Tensor) -> None:
        """Set the draft vocabulary (sorted unique token ids, as many as `draft_vocab`)."""
        if self.vocab_ids is None or ids.shape != self.vocab_ids.shape:
            raise ValueError(f"a draft vocabulary of {self.size} ids is expected, got {tuple(ids.shape)}")
        ids = torch.as_tensor(ids, dtype=torch.long)
        if bool((ids[1:] <= ids[:-1]).any()) or int(ids.min()) < 0 or int(ids.max()) >= self.vocab:
            raise ValueError("draft vocabulary ids must be sorted, unique and inside the vocabulary")
        self.vocab_ids.copy_(ids.to(self.vocab_ids.device))

    def rows(self, weight: torch.Tensor) -> torch.Tensor:
        """The rows of a [V, H] output matrix the draft vocabulary keeps."""
        return weight if self.vocab_ids is None else weight[self.vocab_ids.to(weight.device)]

    def bind(self, lm_head_weight: torch.Tensor) -> None:
        """Read the trunk's output head (shared heads: once, restricted to V'; never stored in the state dict)."""
        self._shared = None if self.own is not None else self.rows(lm_head_weight.detach())

    def init_own(self, lm_head_weight: torch.Tensor) -> None:
        """Own heads start as the trunk's output head (restricted to V'), bias 0 (Hydra's initialisation)."""
        if self.own is not None:
            with torch.no_grad():
                for lin in self.own:
                    lin.weight.copy_(self.rows(lm_head_weight))
                    if lin.bias is not None:
                        lin.bias.zero_()

    def logits(self, x: torch.Tensor, head: int) -> torch.Tensor:
        """[..., V'] logits of head `head` from its features x [..., H]."""
        if self.own is not None:
            return self.own[head](x)
        if self._shared is None:
            raise RuntimeError("heads not bound to a trunk: call heads.bind(model) first")
        return x @ self._shared.to(x.dtype).T

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids of draft-vocabulary indices."""
        return idx if self.vocab_ids is None else self.vocab_ids[idx]

    def index_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary index of each token id, -1 for tokens outside V'."""
        if self.vocab_ids is None:
            return tokens
        pos = torch.searchsorted(self.vocab_ids, tokens.clamp(min=0))
        pos = pos.clamp(max=self.size - 1)
        return torch.where((self.vocab_ids[pos] == tokens) & (tokens >= 0), pos, -1)
