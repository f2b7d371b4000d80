"""Teacher-forced quality of DMTD: no generation, the response tokens of held-out (query, response) rows
scored position by position, per cycle offset j.

For every row the model reads the rendered example (prompt + reference response) once; the thinking layers' output
h_think and h_base do not depend on τ, so they are computed once per batch and only the decoding layers and the head
run again for each τ and schedule (`split.base_and_thinking`, `split.decoding_hidden`). Scores: the response-token
cross-entropy and top-1 accuracy, overall and by the cycle offset of the prediction (j = 0: a full-depth cycle start,
j = τ-1: the furthest late-only prediction), under

* the **decoding schedule** (filter `none`, the primary number): the prompt through every layer, cycle starts from
  its last token, which is exactly what the `dmtd` decoder computes when it is fed the reference tokens (tested:
  equal to the decoder's teacher-forced logits), and
* the **training schedule** (filter `train_schedule`, a diagnostic): Eq. 3's mask over the whole row, prompt
  included (the difference between the two is the train/test mismatch).

`vanilla` scores the plain model. Standard errors treat rows as clusters (the ratio estimator's linearised variance:
tokens of one row are not independent).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...decoding import layers as L
from ...train.losses import token_cross_entropy
from ...train.sft import encode_rows
from ...train.sft_settings import SFTConfig
from .cyclic import decode_offsets, training_offsets
from .settings import DMTDSpec
from .split import base_and_thinking, decoding_hidden

log = logging.getLogger(__name__)
SCHEDULES = ("none", "train_schedule")  # metric filters: the decoding schedule, the training schedule
VANILLA = "vanilla"


@dataclass(frozen=True)
class TFRows:
    """Held-out rows as the model reads them: `ids` [N, W] right-padded, `lengths` [N], `starts` [N] (the first
    response token of each row: the prompt is ids[:start])."""

    ids: torch.Tensor
    lengths: torch.Tensor
    starts: torch.Tensor

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def encode_tf_rows(rows: Sequence[dict], tokenizer: Any, template: str, max_tokens: int, pad_id: int) -> TFRows:
    """(query, response) rows rendered as the training renders them (`train.sft.encode_rows`, response loss)."""
    cfg = SFTConfig(max_tokens=max_tokens, template=template, loss_on="response", shuffle=False)
    examples = encode_rows(rows, tokenizer, cfg, template)
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), int(pad_id), dtype=torch.long)
    for i, (x, _) in enumerate(examples):  # a loop over rows, not tokens
        ids[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
    lengths = torch.tensor([len(x) for x, _ in examples], dtype=torch.long)
    return TFRows(ids, lengths, torch.tensor([s for _, s in examples], dtype=torch.long))


def ratio_stderr(num: np.ndarray, den: np.ndarray) -> float | None:
    """Standard error of sum(num) / sum(den) with rows as clusters (linearisation); None for < 2 rows with tokens."""
    use = den > 0
    k = int(use.sum())
    if k < 2:
        return None
    r = num[use].sum() / den[use].sum()
    resid = num[use] - r * den[use]
    return float(math.sqrt(k / (k - 1) * float((resid**2).sum())) / den[use].sum())


class Tally:
    """Per row and cycle offset: response tokens, top-1 hits and summed CE."""

    def __init__(self, rows: int, tau: int):
        self.tau = tau
        self.tokens = np.zeros((rows, tau))
        self.hits = np.zeros((rows, tau))
        self.ce = np.zeros((rows, tau))

    def add(self, rows: torch.Tensor, offsets: torch.Tensor, sel: torch.Tensor, hit: torch.Tensor, ce: torch.Tensor):
        """`rows` [b] indices; `offsets`, `sel` [b, w]; `hit`, `ce` [n] values at the selected positions."""
        r = rows[:, None].expand_as(sel)[sel].numpy()
        j = offsets.expand_as(sel)[sel].numpy()
        np.add.at(self.tokens, (r, j), 1.0)
        np.add.at(self.hits, (r, j), hit.double().numpy())
        np.add.at(self.ce, (r, j), ce.double().numpy())

    def metrics(self, flt: str) -> dict[str, dict[str, float | None]]:
        """`tf_acc,<flt>`, `tf_ce,<flt>` and per offset `tf_acc@j,<flt>`, `tf_ce@j,<flt>` with standard errors."""
        out: dict[str, dict[str, float | None]] = {}

        def put(name: str, num: np.ndarray, den: np.ndarray) -> None:
            total = den.sum()
            out[f"{name},{flt}"] = {
                "value": float(num.sum() / total) if total else None,
                "stderr": ratio_stderr(num, den),
            }

        put("tf_acc", self.hits.sum(1), self.tokens.sum(1))
        put("tf_ce", self.ce.sum(1), self.tokens.sum(1))
        for j in range(self.tau):
            put(f"tf_acc@{j}", self.hits[:, j], self.tokens[:, j])
            put(f"tf_ce@{j}", self.ce[:, j], self.tokens[:, j])
        return out

    def samples(self) -> list[dict[str, Any]]:
        """One record per row: tokens, hits and CE by offset (for paired analyses)."""
        return [
            {"row": i, "tokens": self.tokens[i].tolist(), "hits": self.hits[i].tolist(), "ce": self.ce[i].tolist()}
            for i in range(self.tokens.shape[0])
        ]


def _batches(data: TFRows, batch_size: int):
    for at in range(0, len(data), batch_size):
        rows = torch.arange(at, min(at + batch_size, len(data)))
        width = int(data.lengths[rows].max())
        ids = data.ids[rows, :width]
        attention = (torch.arange(width)[None, :] < data.lengths[rows, None]).long()
        cols = torch.arange(width - 1)[None, :]
        # the prediction at column c scores token c+1: from the last prompt column to the row's last token
        sel = (cols >= data.starts[rows, None] - 1) & (cols < data.lengths[rows, None] - 1)
        yield rows, ids, attention, sel


def _score(model: torch.nn.Module, h: torch.Tensor, ids: torch.Tensor, sel: torch.Tensor):
    logits = L.head(model, h[:, :-1][sel])
    targets = ids[:, 1:][sel]
    return logits.argmax(-1) == targets, token_cross_entropy(logits, targets)


@torch.inference_mode()
def vanilla_scores(model: torch.nn.Module, data: TFRows, batch_size: int) -> Tally:
    """The plain model's teacher-forced scores (one offset)."""
    tally = Tally(len(data), 1)
    device = next(model.parameters()).device
    for rows, ids, attention, sel in _batches(data, batch_size):
        ids, attention = ids.to(device), attention.to(device)
        h = model.model(input_ids=ids, attention_mask=attention).last_hidden_state  # final norm applied
        logits = model.lm_head(h[:, :-1][sel.to(device)])
        targets = ids[:, 1:][sel.to(device)]
        tally.add(
            rows,
            torch.zeros_like(sel, dtype=torch.long),
            sel,
            (logits.argmax(-1) == targets).cpu(),
            token_cross_entropy(logits, targets).cpu(),
        )
    return tally


@torch.inference_mode()
def dmtd_scores(
    model: torch.nn.Module, spec: DMTDSpec, data: TFRows, taus: Sequence[int], batch_size: int
) -> dict[tuple[int, str], Tally]:
    """Scores of the split at every τ of `taus` under both schedules: {(τ, filter): Tally}."""
    out = {(t, s): Tally(len(data), t) for t in taus for s in SCHEDULES}
    device = next(model.parameters()).device
    for rows, ids, attention, sel in _batches(data, batch_size):
        ids, attention, dsel = ids.to(device), attention.to(device), sel.to(device)
        h_base, h_think, mask, pos = base_and_thinking(model, spec, ids, attention)
        width = ids.shape[1]
        for tau in taus:
            offsets = {
                "none": decode_offsets(data.starts[rows], width, tau),
                "train_schedule": training_offsets(width, tau)[None, :].expand(len(rows), -1),
            }
            for flt, off in offsets.items():
                h = decoding_hidden(model, spec, h_base, h_think, (off == 0).to(device), mask, pos)
                hit, ce = _score(model, h, ids, dsel)
                out[tau, flt].add(rows, off[:, :-1], sel, hit.cpu(), ce.cpu())
    return out


def setting_metrics(tallies: Mapping[str, Tally]) -> dict[str, dict[str, float | None]]:
    """Metrics of one setting from its tallies by filter."""
    out: dict[str, dict[str, float | None]] = {}
    for flt, tally in tallies.items():
        out |= tally.metrics(flt)
    return out
