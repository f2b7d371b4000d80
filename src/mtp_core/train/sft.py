"""Supervised fine-tuning (plain next-token loss on the response) of a declared model: a `finetuned` model source.

Why (paper 1, §5.1 and App. A.1): the paper's students start from models that already answer the training
domain well (L3.1-8B-Magpie, itself Llama-3.1-8B fine-tuned on Magpie conversations, and Qwen3-4B-Instruct);
the self-distillation objective only teaches them to predict several of their own tokens at once, and the
teacher is the frozen starting model. SmolLM2-135M-Instruct solves 0 of 16 synthetic math problems and its
next-token confidence is >= 0.9 on only ~36 % of its own greedy tokens, so at embedded scale a short
fine-tune on the math train split stands in for that post-training. Declared as a model:

```yaml
models:
  smollm2-135m-math: {source: finetuned, base: smollm2-135m, dataset: math, train: {max_steps: 100, ...}}
```

and trained by the launcher (method `sft`, the generic loop: resume, checkpoints, exports).

Data: the same rendering as paper 1 (`data.rows.render_example`: chat template or `bos + query + "\\n\\n" +
response`), truncated to `max_tokens`, one example per row. A micro-batch's rows are packed into sequences of at
most `max_tokens` tokens (`pack_rows`, first-fit decreasing; position ids restart at every row, so the model's
packed-sequence masking keeps rows apart and each row's loss is that of the row alone), the sequences
right-padded to the fullest: on the embedded math split that computes ~1.1k token positions per step of 8 rows
instead of ~1.5k for rows padded to the longest (`benchmarks/sft_packing.py`). The loss is the mean cross-entropy
over the response tokens (`loss_on="response"`: the tokens after the rendered prompt, the template's end-of-turn
marker or, plain, an appended EOS included, so the model learns to stop) or over every token but a row's first
(`"all"`). Logits are projected only at the positions whose next token is supervised (`logits_to_keep` as a
boolean mask).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..data.rows import render_example, render_prompt, resolve_template, response_start
from .checkpoint import export_hf
from .config import TrainConfig
from .launch.methods import TrainingMethod
from .loop import MicroBatchSpec, ShuffledOrder, StepContext, StepOutput, TrainResult, train
from .losses import token_cross_entropy
from .sft_settings import SETTINGS, SFTConfig

log = logging.getLogger(__name__)
IGNORE = -100


def encode_rows(rows: Sequence[dict], tokenizer: Any, cfg: SFTConfig, template: str) -> list[tuple[list[int], int]]:
    """Rows -> (token ids truncated to `max_tokens`, index of the first supervised token).

    The plain template gets the tokenizer's EOS appended (the chat template ends the turn itself), so the model
    learns to stop either way. The first response token is where the tokenised example stops agreeing with the
    tokenised prompt (the prompt's length unless a merge crosses the boundary; an earlier divergence, i.e. a
    template that renders the prompt differently inside the conversation, is counted and logged). Rows whose
    response is truncated away entirely are dropped and counted; none left is an error."""
    if not rows:
        raise ValueError("no training rows")
    full = tokenizer([render_example(r, tokenizer, template) for r in rows], add_special_tokens=False).input_ids
    if template == "plain" and tokenizer.eos_token_id is not None:
        full = [ids + [tokenizer.eos_token_id] for ids in full]
    if cfg.loss_on == "all":
        return [(ids[: cfg.max_tokens], 1) for ids in full]
    prompts = tokenizer([render_prompt(r, tokenizer, template) for r in rows], add_special_tokens=False).input_ids
    out, diverged = [], 0
    for ids, p in zip(full, prompts):
        start = response_start(ids, p)
        diverged += start < len(p) - 1
        if start < min(len(ids), cfg.max_tokens):
            out.append((ids[: cfg.max_tokens], start))
    if diverged:
        log.warning(
            "SFT data: in %d row(s) the rendered example departs from the rendered prompt before the "
            "prompt's last token; their loss starts there",
            diverged,
        )
    if len(out) < len(full):
        log.warning(
            "SFT data: %d of %d row(s) dropped: the prompt fills max_tokens %d",
            len(full) - len(out),
            len(full),
            cfg.max_tokens,
        )
    if not out:
        raise ValueError(f"no row keeps a response token within max_tokens {cfg.max_tokens}")
    return out


def pack_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: the indices of `lengths` grouped into bins whose lengths sum to at most `capacity`
    (a row longer than `capacity` gets a bin of its own); ties keep index order, so the packing is deterministic."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        j = next((j for j, r in enumerate(room) if lengths[i] <= r), None)
        if j is None:
            bins.append([i])
            room.append(capacity - lengths[i])
        else:
            bins[j].append(i)
            room[j] -= lengths[i]
    return bins


class SFTBatches:
    """`BatchSource`: the rows at stream positions `spec.start ..` of `ShuffledOrder`, packed (`pack_rows`, at most
    `max_tokens` per sequence) and right-padded to the fullest sequence. Keys: `input_ids`; `position_ids`
    (0.. within each row, 0.. again over the padding); `labels` (the token ids where supervised, -100 elsewhere:
    prompts, every row's first token, padding); `rows` (the row's index in the micro-batch, -1 on padding).
    No attention mask: without one, HF models read the packed layout from the position ids, and right padding
    is never attended to by a real token under the causal mask."""

    def __init__(self, examples: Sequence[tuple[list[int], int]], pad_id: int, cfg: SFTConfig):
        self.examples, self.pad_id, self.capacity = list(examples), int(pad_id), cfg.max_tokens
        self.order = ShuffledOrder(len(self.examples), seed=cfg.seed, shuffle=cfg.shuffle)

    def micro_batch(self, spec: MicroBatchSpec) -> dict[str, torch.Tensor]:
        rows = [self.examples[i] for i in self.order.indices(spec.start, spec.size)]
        lengths = [len(ids) for ids, _ in rows]
        bins = pack_rows(lengths, self.capacity)
        width = max(sum(lengths[i] for i in b) for b in bins)
        input_ids = torch.full((len(bins), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(bins), width), IGNORE, dtype=torch.long)
        row_of = torch.full((len(bins), width), -1, dtype=torch.long)
        positions = torch.empty((len(bins), width), dtype=torch.long)  # every entry written below
        for j, b in enumerate(bins):  # a loop over rows, not tokens
            c = 0
            for i in b:
                ids, start = rows[i]
                t, n, s = torch.as_tensor(ids, dtype=torch.long), len(ids), max(start, 1)
                input_ids[j, c : c + n] = t
                labels[j, c + s : c + n] = t[s:]
                row_of[j, c : c + n] = i
                positions[j, c : c + n] = torch.arange(n)
                c += n
            positions[j, c:] = torch.arange(width - c)
        return {"input_ids": input_ids, "position_ids": positions, "labels": labels, "rows": row_of}


@dataclass(frozen=True)
class ResponseLogits:
    """The logits a next-token loss reads: one row per position whose next token is supervised (`supervised`,
    [B, T] bool, row-major), and their `targets` (token ids)."""

    logits: torch.Tensor
    targets: torch.Tensor
    supervised: torch.Tensor


def response_logits(model: Any, batch: dict[str, torch.Tensor]) -> ResponseLogits:
    """The model's logits at the positions whose next token is supervised (`logits_to_keep` as a boolean mask: the
    vocabulary projection of every other position is never computed)."""
    targets = batch["labels"][:, 1:]
    supervised = torch.nn.functional.pad(targets != IGNORE, (0, 1), value=False)
    if not bool(supervised.any()):
        raise ValueError("a micro-batch without supervised tokens (every response truncated away?)")
    logits = model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        use_cache=False,
        logits_to_keep=supervised,
    ).logits
    return ResponseLogits(logits, targets[supervised[:, :-1]], supervised)


def sft_loss(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Mean next-token CE over the supervised tokens, and their count (`response_logits`)."""
    out = response_logits(model, batch)
    return token_cross_entropy(out.logits, out.targets).mean(), len(out.targets)


class SFTStep:
    """Step function of the generic loop (`loop.train`)."""

    metric_names = ("sft_tokens",)

    def __init__(self, tokenizer: Any = None):
        self.tokenizer = tokenizer

    def __call__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], ctx: StepContext) -> StepOutput:
        loss, n = sft_loss(model, batch)
        return StepOutput(
            loss=loss,
            weight=float(n),
            metrics={"sft_tokens": (float(n), 1.0)},
            tokens=int((batch["rows"] >= 0).sum()),
        )

    def export(self, model: torch.nn.Module, path: str | os.PathLike) -> Path:
        return export_hf(model, path, self.tokenizer)


def train_sft(
    loaded: Any,
    rows: Sequence[dict],
    sft_cfg: SFTConfig | dict,
    train_cfg: TrainConfig | dict,
    out_dir: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    dist: Any = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Fine-tune `loaded.model` on (query, response) rows; the final model is exported to `out_dir/model`."""
    cfg = sft_cfg if isinstance(sft_cfg, SFTConfig) else SFTConfig.from_dict(sft_cfg)
    tc = train_cfg if isinstance(train_cfg, TrainConfig) else TrainConfig.from_dict(train_cfg)
    tok = loaded.tokenizer
    template = resolve_template(cfg.template, loaded.chat_template)
    examples = encode_rows(rows, tok, cfg, template)
    cut = sum(len(ids) == cfg.max_tokens for ids, _ in examples)
    log.info(
        "SFT data: %d rows, template %s, loss on %s, %d row(s) reach max_tokens %d",
        len(examples),
        template,
        cfg.loss_on,
        cut,
        cfg.max_tokens,
    )
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else loaded.eos_ids[0]
    return train(
        SFTStep(tok),
        loaded.model,
        SFTBatches(examples, pad_id, cfg),
        tc,
        out_dir,
        dist=dist,
        device=device,
        callbacks=callbacks,
    )


# ------------------------------------------------------------------------------------- launcher method `sft`

LAUNCH = TrainingMethod(SETTINGS, train_sft)
launch_entry = LAUNCH.entry
