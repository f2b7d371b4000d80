"""Training Medusa and Hydra heads by self-distillation on the frozen trunk (paper 5 §1.1; Hydra++'s "teacher
loss"; Medusa's self-distillation recipe), through the one training loop (`train.loop`) and the launcher
(method `p5_heads`).

Data: `selfdistill.SelfDistillData` (the trunk's greedy answers with its hidden states h_t). For a row
y_0 .. y_{L-1} whose answer starts at R, head i at position t reads h_t (Medusa) or cat(e_t, E(y_{t+1}) ..
E(y_{t+1+i})) (Hydra, e = the prefix layer run causally over h) and predicts y_{t+2+i}; the positions trained are
those whose predicted token is an answer token (t + 2 + i in [R, L - 1]). Loss (`loss`): `teacher` (default,
Hydra++: cross-entropy to the trunk's distribution at t + 1 + i, softmax(lm_head(h_{t+1+i})) renormalised on
the draft vocabulary) or `hard` (Medusa-1: cross-entropy to y_{t+2+i}; targets outside the draft vocabulary
are skipped), summed over heads with `head_weights` (default 1 each; Medusa's paper uses 0.8^i). On greedy
answers the two share their argmax. Metrics per head: `loss_i`, `top1_i` (the head's argmax is y_{t+2+i}).

The draft vocabulary (`draft_vocab` ids) is fixed before training: the most frequent answer tokens of the
training rows (ties by id), EOS ids included; its coverage of the held-out answers is reported. `holdout`
(a fraction of the rows, by a seeded hash of their ids) is never trained on: per-head top-1 and top-5
accuracy on it goes into the training record (`heads_accuracy`).

The trainable module handed to the loop is `HeadsObjective` (the heads plus the loss, so DDP wraps a module whose
forward is the loss); the trunk stays frozen outside it and the loop exports the heads alone (`heads.save_heads`,
the trunk's fingerprint included).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ...models.heads import DraftHeads, save_heads
from ...models.heads.hydra import HydraHeads
from ...models.heads.medusa import MedusaHeads
from ...train.config import TrainConfig
from ...train.launch.methods import Inputs, TrainingMethod
from ...train.loop import MicroBatchSpec, ShuffledOrder, StepContext, StepOutput, train
from .selfdistill import SelfDistillData
from .settings import SETTINGS, HeadsTrainConfig

log = logging.getLogger(__name__)
HEADS = {"medusa": MedusaHeads, "hydra": HydraHeads}  # the class of each of `settings.ARCHS`


def holdout_rows(data: SelfDistillData, fraction: float, seed: int) -> list[int]:
    """Rows kept out of training: those whose seeded hash of the id falls below `fraction` (at least one when
    fraction > 0 and there are two rows or more)."""
    if fraction <= 0:
        return []

    def u(i: int) -> float:
        key = f"{seed}/{data.rows[i].get('id', i)}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64

    scores = [u(i) for i in range(len(data))]
    held = [i for i, s in enumerate(scores) if s < fraction]
    if not held and len(data) > 1:
        held = [int(np.argmin(scores))]
    return held


def draft_vocabulary(
    data: SelfDistillData, rows: Sequence[int], size: int, vocab: int, eos: Sequence[int]
) -> list[int]:
    """The `size` most frequent answer tokens of `rows` (ties by id, then unused ids by id), EOS ids first."""
    counts = np.zeros(vocab, dtype=np.int64)
    for i in rows:
        r = data.rows[i]
        np.add.at(counts, np.asarray(r["tokens"][r["prompt_len"] :]), 1)
    counts[list(eos)] = np.iinfo(np.int64).max
    order = np.lexsort((np.arange(vocab), -counts))
    return sorted(int(t) for t in order[:size])


def coverage(data: SelfDistillData, rows: Sequence[int], ids: Sequence[int]) -> float | None:
    keep = set(ids)
    toks = [t for i in rows for t in data.rows[i]["tokens"][data.rows[i]["prompt_len"] :]]
    return float(np.mean([t in keep for t in toks])) if toks else None


class HeadsBatches:
    """`BatchSource` over the training rows: `tokens` [B, T+1], `hidden` [B, T, H] (T = the longest row - 1),
    `length` [B] (tokens per row), `start` [B] (the answer's first token)."""

    def __init__(self, data: SelfDistillData, rows: Sequence[int], seed: int = 0, dtype: torch.dtype = torch.float32):
        if not rows:
            raise ValueError("no training rows for the heads")
        self.data, self.rows, self.dtype = data, list(rows), dtype
        self.order = ShuffledOrder(len(self.rows), seed=seed)

    def batch(self, idx: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = [self.data.rows[i] for i in idx]
        width = max(len(r["tokens"]) for r in rows)
        hsz = self.data.hidden.shape[1]
        tokens = torch.zeros(len(rows), width, dtype=torch.long)
        hidden = torch.zeros(len(rows), width - 1, hsz, dtype=self.dtype)
        for b, (i, r) in enumerate(zip(idx, rows)):  # a loop over rows, not tokens
            n = len(r["tokens"])
            tokens[b, :n] = torch.as_tensor(r["tokens"])
            hidden[b, : n - 1] = torch.from_numpy(np.asarray(self.data.row_hidden(i), dtype=np.float32))
        length = torch.tensor([len(r["tokens"]) for r in rows])
        start = torch.tensor([r["prompt_len"] for r in rows])
        return {"tokens": tokens, "hidden": hidden, "length": length, "start": start}

    def micro_batch(self, spec: MicroBatchSpec) -> dict[str, torch.Tensor]:
        return self.batch([self.rows[j] for j in self.order.indices(spec.start, spec.size)])


def target_positions(batch: dict[str, torch.Tensor], head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, positions t) where head `head` is trained: its target y_{t+2+head} is an answer token."""
    t = torch.arange(batch["hidden"].shape[1], device=batch["hidden"].device)[None]
    target = t + 2 + head
    ok = (target <= batch["length"][:, None] - 1) & (target >= batch["start"][:, None])
    return ok.nonzero(as_tuple=True)


class HeadsObjective(nn.Module):
    """The heads and their self-distillation loss (module docstring); `forward(batch)` -> (loss, per-head stats)."""

    def __init__(self, heads: DraftHeads, cfg: HeadsTrainConfig):
        super().__init__()
        self.heads, self.cfg = heads, cfg
        self._teacher: torch.Tensor | None = None  # the trunk's output rows of the draft vocabulary

    def bind(self, trunk: nn.Module) -> None:
        self.heads.bind(trunk)
        self._teacher = self.heads.out.rows(trunk.get_output_embeddings().weight.detach())

    def head_inputs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """What every head reads at each position: h (Medusa) or the prefix layer's e (Hydra)."""
        h = batch["hidden"]
        if not isinstance(self.heads, HydraHeads) or self.heads.prefix is None:
            return h
        n = h.shape[1]
        valid = torch.arange(n, device=h.device)[None] < (batch["length"][:, None] - 1)
        causal = torch.ones(n, n, dtype=torch.bool, device=h.device).tril()
        mask = (causal[None] & valid[:, None, :]) | torch.eye(n, dtype=torch.bool, device=h.device)
        pos = torch.arange(n, device=h.device)[None].expand(h.shape[0], n)
        return self.heads.prefix_forward(h, pos, mask[:, None], None)

    def head_logits(self, x: torch.Tensor, batch: dict, head: int, rows: torch.Tensor, t: torch.Tensor):
        if isinstance(self.heads, HydraHeads):
            j = torch.arange(head + 1, device=t.device)
            toks = batch["tokens"][rows[:, None], t[:, None] + 1 + j[None]]  # root, then the drafts before
            return self.heads.head_logits(head, x[rows, t], self.heads.embed(toks))
        return self.heads.head_logits(x[rows, t], head)

    def forward(self, batch: dict[str, torch.Tensor], topk: int = 1) -> tuple[torch.Tensor, list[dict[str, float]]]:
        x = self.head_inputs(batch)
        total = x.new_zeros(())
        stats = []
        for head, w in enumerate(self.cfg.weights()):
            rows, t = target_positions(batch, head)
            if rows.numel() == 0:
                stats.append({"n": 0.0, "loss": 0.0, "top1": 0.0, "topk": 0.0})
                continue
            logits = self.head_logits(x, batch, head, rows, t).float()
            logp = torch.log_softmax(logits, dim=-1)
            target = self.heads.out.index_of(batch["tokens"][rows, t + 2 + head])
            if self.cfg.loss == "teacher":
                q = torch.softmax(batch["hidden"][rows, t + 1 + head].float() @ self._teacher.float().T, dim=-1)
                loss = -(q * logp).sum(-1).mean()
            else:
                inside = target >= 0
                loss = (
                    torch.nn.functional.nll_loss(logp[inside], target[inside]) if bool(inside.any()) else logp.sum() * 0
                )
            total = total + w * loss
            with torch.no_grad():
                best = logp.topk(min(topk, logp.shape[-1]), dim=-1).indices
                hit = (best == target[:, None]) & (target[:, None] >= 0)
                stats.append(
                    {
                        "n": float(rows.numel()),
                        "loss": float(loss.detach()) * rows.numel(),
                        "top1": float(hit[:, 0].sum()),
                        "topk": float(hit.any(-1).sum()),
                    }
                )
        return total, stats


class HeadsStep:
    """The loop's step function: the objective's loss, per-head `loss_i` and `top1_i` (module docstring)."""

    def __init__(self, objective: HeadsObjective, trunk: nn.Module, trunk_name: str | None, extra: dict):
        self.trunk, self.trunk_name, self.extra = trunk, trunk_name, extra
        self._objective = objective
        k = objective.heads.num_heads
        self.metric_names = [f"loss_{i}" for i in range(k)] + [f"top1_{i}" for i in range(k)]

    def setup(self, device: torch.device, dist: Any) -> None:
        self.trunk.to(device)
        self._objective.bind(self.trunk)

    def __call__(self, model: nn.Module, batch: dict, ctx: StepContext) -> StepOutput:
        loss, stats = model(batch)
        metrics = {}
        for i, s in enumerate(stats):
            if s["n"]:
                metrics[f"loss_{i}"] = (s["loss"], s["n"])
                metrics[f"top1_{i}"] = (s["top1"], s["n"])
        return StepOutput(loss=loss, weight=stats[0]["n"] or 1.0, metrics=metrics, tokens=int(batch["length"].sum()))

    def export(self, model: HeadsObjective, path: str | os.PathLike) -> Path:
        return save_heads(model.heads, path, self.trunk, trunk_name=self.trunk_name, extra=self.extra)


@torch.no_grad()
def heads_accuracy(objective: HeadsObjective, batches: HeadsBatches, rows: Sequence[int], batch_size: int = 8) -> dict:
    """Per head: top-1 and top-5 accuracy (the head's argmax / top 5 over the draft vocabulary hold the token of
    the trunk's greedy answer) on `rows`, with the number of positions."""
    objective.eval()
    k = objective.heads.num_heads
    n, top1, top5 = np.zeros(k), np.zeros(k), np.zeros(k)
    dev = next(objective.parameters()).device
    for i in range(0, len(rows), batch_size):
        batch = {key: v.to(dev) for key, v in batches.batch(rows[i : i + batch_size]).items()}
        for head, s in enumerate(objective(batch, topk=5)[1]):
            n[head] += s["n"]
            top1[head] += s["top1"]
            top5[head] += s["topk"]
    safe = np.maximum(n, 1)
    return {"n": n.astype(int).tolist(), "top1": (top1 / safe).tolist(), "top5": (top5 / safe).tolist()}


def train_heads(
    trunk: nn.Module,
    data: SelfDistillData,
    heads_cfg: HeadsTrainConfig | dict,
    train_cfg: TrainConfig | dict,
    out_dir: str | os.PathLike,
    *,
    trunk_name: str | None = None,
    eos_ids: Sequence[int] = (),
    device: Any = None,
    dist: Any = None,
    callbacks: Sequence[Any] = (),
) -> dict:
    """Train fresh heads on the frozen `trunk` (module docstring); returns the loop's result with
    `heads_accuracy` (held-out rows) and `draft_vocab_coverage`."""
    cfg = heads_cfg if isinstance(heads_cfg, HeadsTrainConfig) else HeadsTrainConfig.from_dict(heads_cfg)
    tc = train_cfg if isinstance(train_cfg, TrainConfig) else TrainConfig.from_dict(train_cfg)
    trunk.eval().requires_grad_(False)
    with torch.random.fork_rng():  # the heads' initial weights are a function of the seed
        torch.manual_seed(cfg.seed)
        heads = HEADS[cfg.arch].for_trunk(trunk, **cfg.module_config())
    held = holdout_rows(data, cfg.holdout, cfg.seed)
    rows = [i for i in range(len(data)) if i not in set(held)]
    extra: dict[str, Any] = {"rows": len(rows), "holdout_rows": len(held), "loss": cfg.loss}
    if cfg.draft_vocab is not None:
        ids = draft_vocabulary(data, rows, cfg.draft_vocab, heads.out.vocab, eos_ids)
        heads.out.set_vocab(torch.tensor(ids))
        heads.out.init_own(trunk.get_output_embeddings().weight)
        extra["draft_vocab_coverage"] = coverage(data, held or rows, ids)
    dtype = next(trunk.parameters()).dtype
    objective = HeadsObjective(heads, cfg)
    batches = HeadsBatches(data, rows, seed=cfg.seed, dtype=dtype)
    step = HeadsStep(objective, trunk, trunk_name, extra)
    result = train(step, objective, batches, tc, out_dir, dist=dist, device=device, callbacks=callbacks)
    out = {**asdict(result), **extra}
    if held:
        out["heads_accuracy"] = heads_accuracy(objective, HeadsBatches(data, held, dtype=dtype), held)
        log.info("held-out accuracy: %s", out["heads_accuracy"])
    return out


# ------------------------------------------------------------------------------- launcher method `p5_heads`


def _inputs(settings: dict) -> Inputs:
    """The trunk and the self-distillation data, and the trunk's name and EOS ids."""
    from ...models.load import load_model

    loaded = load_model(settings["model"], base_dir=settings.get("base_dir"))
    data = SelfDistillData.read(settings["data"])
    return (loaded.model, data), {"trunk_name": loaded.name, "eos_ids": loaded.eos_ids}


LAUNCH = TrainingMethod(SETTINGS, train_heads, load=_inputs)
launch_entry = LAUNCH.entry
