"""Calibration tables: everything the offline search, the debiasing, the throughput model, the scheduler's τ
sweep and the regime analysis need from the model, read once from greedy continuations of the calibration
prompts (the exact simulation at temperature 0).

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
(one per prompt), saved as `table.npz` + `table.json`; `capture.build_table` computes them from the model (this
module, the format, needs no torch: the tables and figures read it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...io import InputError, atomic_path, atomic_write_json

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
