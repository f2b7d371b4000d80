"""Calibration tables: everything the offline search, the debiasing, the throughput model, the scheduler's τ
sweep and the regime analysis need from the model, read once from greedy continuations of the calibration
prompts (spec §4.2, the exact simulation at temperature 0).

At temperature 0 every lossless decoder emits the same greedy continuation x_1 .. x_n; a tree only changes where
the steps start. Along an accepted path the drafted parents equal the true tokens, so a head's distribution there
is its teacher-forced one (Hydra's included: its grounded inputs and its prefix layer see true tokens and the
trunk's hidden states at the committed positions). For the state whose root is x_s (0-based: state i, root
tokens[i]) the table holds, per head j:

* `ranks[i, j]`: the rank of x_{s+1+j} (tokens[i+1+j]) among head j's draft-vocabulary logits, teacher-forced;
  -1 when it is not among the top `topk` (Medusa's TOPK = 10: deeper ranks are not representable in its tree
  indices), outside the draft vocabulary, or past the end of the continuation;
* `chain[i, j]`: head j's top-1 probability along the heads' OWN greedy chain (the scheduler's p_{j+1});

and per state `p0[i]` (the trunk's top-1 probability at the root's distribution, softmax at temperature 1) and
`entropy[i]` (its entropy in nats, the regime analysis' block-start entropy). A table is a list of `PromptTable`s
(one per prompt), saved as `table.npz` + `table.json`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...heads import DraftHeads
from ...heads.hydra import HydraHeads
from ...io import InputError, atomic_path, atomic_write_json
from ...masks.published import MEDUSA_TOPK
from .capture import Trajectory

MISS = -1


@dataclass
class PromptTable:
    """One prompt's calibration rows (module docstring); n = len(tokens) states."""

    id: str
    tokens: np.ndarray  # [n] int: the greedy continuation x_1 .. x_n
    ranks: np.ndarray  # [n, K] int16
    chain: np.ndarray  # [n, K] float32
    p0: np.ndarray  # [n] float32
    entropy: np.ndarray  # [n] float32
    prompt_len: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])


def _ranks(logits: torch.Tensor, target: torch.Tensor, topk: int) -> torch.Tensor:
    """Rank of each row's target index among its logits (number of strictly larger logits), MISS for targets
    outside the vocabulary (-1) or ranked >= topk."""
    at = logits.gather(-1, target.clamp(min=0)[:, None])
    rank = (logits > at).sum(-1)
    return torch.where((target >= 0) & (rank < topk), rank, MISS)


@torch.inference_mode()
def prompt_table(heads: DraftHeads, traj: Trajectory, lm_head: torch.nn.Module, topk: int = MEDUSA_TOPK) -> PromptTable:
    """The calibration rows of one greedy trajectory (heads bound to their trunk)."""
    dev = lm_head.weight.device
    p, n, k = len(traj.prompt), len(traj.tokens), heads.num_heads
    h = torch.from_numpy(np.asarray(traj.hidden, dtype=np.float32)).to(dev, lm_head.weight.dtype)
    toks = torch.tensor(traj.tokens, device=dev)
    idx = torch.arange(n, device=dev)
    probs = torch.softmax(lm_head(h[p - 1 : p - 1 + n]).float(), dim=-1)  # the root's distribution per state
    p0 = probs.max(-1).values
    entropy = -(probs * torch.log(probs.clamp(min=1e-30))).sum(-1)
    ranks = torch.full((n, k), MISS, dtype=torch.long, device=dev)
    chain = torch.zeros(n, k, device=dev)
    hydra = isinstance(heads, HydraHeads)
    if hydra:
        pos = torch.arange(h.shape[0], device=dev)[None]
        x = heads.prefix_forward(h[None], pos, None, None)[0, p - 1 : p - 1 + n]
        chain_toks = toks[:, None]
    else:
        x = h[p - 1 : p - 1 + n]
    for j in range(k):
        target_at = idx + 1 + j  # tokens[i + 1 + j] is head j's target in state i
        ok = target_at < n
        if hydra:
            path = (idx[:, None] + torch.arange(j + 1, device=dev)[None]).clamp(max=n - 1)  # root .. draft j
            logits = heads.head_logits(j, x, heads.embed(toks[path]))
            chain_logits = heads.head_logits(j, x, heads.embed(chain_toks))
            chain_toks = torch.cat([chain_toks, heads.out.token_ids(chain_logits.argmax(-1))[:, None]], dim=1)
        else:
            logits = chain_logits = heads.head_logits(x, j)
        target = heads.out.index_of(torch.where(ok, toks[target_at.clamp(max=n - 1)], -1))
        ranks[:, j] = _ranks(logits.float(), target, topk)
        chain[:, j] = torch.softmax(chain_logits.float(), dim=-1).max(-1).values
    return PromptTable(
        id="",
        tokens=np.asarray(traj.tokens, dtype=np.int64),
        ranks=ranks.cpu().numpy().astype(np.int16),
        chain=chain.cpu().numpy().astype(np.float32),
        p0=p0.cpu().numpy().astype(np.float32),
        entropy=entropy.cpu().numpy().astype(np.float32),
        prompt_len=p,
    )


def build_table(
    heads: DraftHeads, trajectories: Sequence[Trajectory], lm_head: torch.nn.Module, ids: Sequence[str]
) -> list[PromptTable]:
    out = []
    for i, t in zip(ids, trajectories):
        if not t.tokens:
            continue
        pt = prompt_table(heads, t, lm_head)
        pt.id = str(i)
        out.append(pt)
    return out


FIELDS = ("tokens", "ranks", "chain", "p0", "entropy")


def write_table(path: str | os.PathLike, table: Sequence[PromptTable], meta: dict | None = None) -> None:
    """`<path>.npz` (the arrays of every prompt, concatenated) and `<path>.json` (ids, lengths, meta)."""
    path = Path(path)
    arrays = {f: np.concatenate([getattr(t, f) for t in table]) for f in FIELDS}
    with atomic_path(path.with_suffix(".npz")) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)
    info = {
        "ids": [t.id for t in table],
        "lengths": [t.n for t in table],
        "prompt_lens": [t.prompt_len for t in table],
        "meta": meta or {},
    }
    atomic_write_json(path.with_suffix(".json"), info)


def read_table(path: str | os.PathLike) -> tuple[list[PromptTable], dict]:
    path = Path(path)
    for suffix in (".npz", ".json"):
        if not path.with_suffix(suffix).is_file():
            raise InputError(f"{path.with_suffix(suffix)}: no calibration table")
    info = json.loads(path.with_suffix(".json").read_text())
    arrays = np.load(path.with_suffix(".npz"))
    bounds = np.cumsum([0, *info["lengths"]])
    out = []
    for i, (pid, plen) in enumerate(zip(info["ids"], info["prompt_lens"])):
        sl = slice(int(bounds[i]), int(bounds[i + 1]))
        out.append(PromptTable(pid, *(arrays[f][sl] for f in FIELDS), prompt_len=int(plen)))
    return out, info.get("meta", {})
