"""Paper 1's step function and data pipeline for the generic loop (`mtp_core.train.loop.train`).

Data (§5.1, App. A.1 "Chat Templating", the official code's templates): each row (`query`, `response`) becomes one
example, never packed:
* `chat` (SmolLM2, Llama-Magpie): the tokenizer's chat template over [user: query, assistant: response],
  without a generation prompt (the official `query_resp_chat`), tokenised with `add_special_tokens=False`
  (the template writes its own BOS / markers);
* `plain` (Qwen): `bos + query + "\n\n" + response`, with bos = the tokenizer's BOS token or "" (the official
  `join_query_resp_bos`); no EOS is appended (`append_eos=True` appends one): the row is padded with the pad
  id, which for Qwen is an EOS token, so the last region is "padded out with EOS" (App. A.1).
Rows are truncated to the tokens the layout can read at k_min (`max_row_tokens`); their true lengths are kept,
so the end rule (the region whose targets reach the row's end is the last supervised one) fires only for rows
that really end inside the window. Ends are found from lengths, not token ids: chat markers such as
`<|im_end|>` also close the system and user turns, and SmolLM2's pad id is `<|im_end|>` itself.

Batches (§4.2-4.4): `P1Batches.micro_batch(spec)` draws (k, offset) for (step, chunk) with
`draw_k_offset(step, rank=chunk)` (independent streams; `coupled_draw=True` reproduces the official coupled
draw, whose "rank" is our chunk when each rank runs one micro-batch per step, as in the paper runs), takes
the rows at stream positions `spec.start ..` of `ShuffledOrder`, and builds the `BlockedBatch`.

Step (§3.3): `P1Step` holds the frozen teacher (a deep copy of the student's initial weights, mask row
included: §4.1) and calls `mtp_core.papers.p1.losses.p1_loss`. Its `state_dict` is a fingerprint of the teacher, checked
on resume, because the teacher is rebuilt from the base model, not saved with every checkpoint.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...data.rows import render_example, render_prompt, resolve_template, response_start
from ...train.checkpoint import export_hf
from ...train.config import TrainConfig
from ...train.launch.methods import Inputs, TrainingMethod, load_model_and_rows
from ...train.loop import MicroBatchSpec, ShuffledOrder, StepContext, StepOutput, TrainResult, resolve_device, train
from .losses import metric_names, p1_loss
from .masks import BlockedBatch, blocked_layout, build_blocked_batch, draw_k_offset
from .settings import SETTINGS, P1Config

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ data


def max_row_tokens(cfg: P1Config) -> int:
    """Tokens of a row any draw can read (sources + the targets' one extra), i.e. at k = k_min, offset 0."""
    return blocked_layout(cfg.seq_len, cfg.num_regions, cfg.k_min, 0).num_source_tokens + 1


@dataclass(frozen=True)
class EncodedRows:
    """Rows as paper 1 trains on them: `tokens` [N, max_tokens] padded, `lengths` [N] true lengths before
    truncation, `response_start` [N] each row's first response token (`data.rows.response_start`)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    response_start: torch.Tensor

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def encode_examples(
    rows: Sequence[dict],
    tokenizer: Any,
    template: str,
    max_tokens: int,
    append_eos: bool = False,
    pad_id: int | None = None,
) -> EncodedRows:
    """Rows -> `EncodedRows` (token ids padded with `pad_id` to `max_tokens`, true lengths, response starts)."""
    texts = [render_example(r, tokenizer, template) for r in rows]
    if not texts:
        raise ValueError("no training rows")
    ids = tokenizer(texts, add_special_tokens=False).input_ids
    prompts = tokenizer([render_prompt(r, tokenizer, template) for r in rows], add_special_tokens=False).input_ids
    starts = torch.tensor([response_start(x, p) for x, p in zip(ids, prompts)], dtype=torch.long)
    if append_eos:
        if tokenizer.eos_token_id is None:
            raise ValueError("append_eos needs a tokenizer with an EOS token")
        ids = [x + [tokenizer.eos_token_id] for x in ids]
    pad = tokenizer.pad_token_id if pad_id is None else pad_id
    if pad is None:
        raise ValueError("the tokenizer has no pad token; pass pad_id")
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    out = torch.full((len(ids), max_tokens), int(pad), dtype=torch.long)
    for i, x in enumerate(ids):  # a loop over rows, not tokens
        n = min(len(x), max_tokens)
        out[i, :n] = torch.as_tensor(x[:n], dtype=torch.long)
    return EncodedRows(out, lengths, starts)


class P1Batches:
    """The P1 `BatchSource`: micro-batch (step, chunk) = blocked batch of the rows at stream positions
    `spec.start .. start + size` under a (k, offset) drawn for (step, chunk)."""

    def __init__(self, rows: EncodedRows, cfg: P1Config, *, mask_id: int, pad_id: int, eos_ids: Sequence[int] = ()):
        self.rows, self.cfg = rows, cfg
        self.mask_id, self.pad_id, self.eos_ids = int(mask_id), int(pad_id), tuple(eos_ids)
        self.order = ShuffledOrder(len(rows), seed=cfg.seed, shuffle=cfg.shuffle)

    def draw(self, step: int, chunk: int) -> tuple[int, int]:
        c = self.cfg
        return draw_k_offset(
            step,
            seq_len=c.seq_len,
            num_regions=c.num_regions,
            k_max=c.k_max,
            k_min=c.k_min,
            rank=chunk,
            seed=c.seed,
            random_k=c.random_k,
            random_offset=c.random_offset,
            coupled_draw=c.coupled_draw,
        )

    def micro_batch(self, spec: MicroBatchSpec) -> BlockedBatch:
        k, offset = self.draw(spec.step, spec.chunk)
        idx = torch.from_numpy(self.order.indices(spec.start, spec.size))
        c = self.cfg
        return build_blocked_batch(
            self.rows.tokens[idx],
            lengths=self.rows.lengths[idx],
            response_start=self.rows.response_start[idx],
            k=k,
            offset=offset,
            num_regions=c.num_regions,
            seq_len=c.seq_len,
            mask_id=self.mask_id,
            pad_id=self.pad_id,
            eos_ids=self.eos_ids,
            bda=c.bda,
        )


# ------------------------------------------------------------------------------------------------ step


def frozen_copy(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A deep copy with no gradients, in eval mode (the teacher)."""
    teacher = copy.deepcopy(model)
    if dtype is not None:
        teacher.to(dtype)
    teacher.eval()
    teacher.requires_grad_(False)
    return teacher


def fingerprint(model: torch.nn.Module) -> float:
    """A cheap checksum of a model's weights (sum of sums and sums of squares, float64)."""
    with torch.no_grad():
        return float(sum(p.double().sum() + p.double().square().sum() for p in model.parameters()))


def _set_flex(model: Any) -> bool:
    try:
        model.set_attn_implementation("flex_attention")
        return True
    except Exception as e:
        log.warning("flex_attention unavailable (%s); using dense masks", e)
        return False


class P1Step:
    """The P1 step function: `p1_loss(student, teacher, batch)` -> `StepOutput` (module docstring).

    `teacher`: the frozen teacher; by default a deep copy of `student` as passed in, so build the step BEFORE
    any training (or loading of a trained state) touches the student.
    """

    def __init__(
        self, student: torch.nn.Module, cfg: P1Config, *, tokenizer: Any = None, teacher: torch.nn.Module | None = None
    ):
        self.cfg = cfg
        self.tokenizer = tokenizer
        if teacher is None and cfg.loss.needs_teacher:
            dtype = getattr(torch, cfg.teacher_dtype) if cfg.teacher_dtype else None
            teacher = frozen_copy(student, dtype)
        self.teacher = teacher
        self._fingerprint = fingerprint(teacher) if teacher is not None else None
        lc = cfg.loss
        self.metric_names = metric_names(
            cfg.k_max, lc.objective, lc.prefix_weight > 0, lc.entropy_weight != 0, lc.per_position_metrics
        )

    def setup(self, device: torch.device, dist: Any) -> None:
        """Called by the loop before training: move the teacher next to the student.

        (Under FSDP2 the launcher would shard the teacher here too, `dist.py`.)"""
        if self.teacher is not None:
            self.teacher.to(device)

    def prepare_student(self, student: torch.nn.Module, device: torch.device) -> None:
        """Switch student and teacher to flex_attention on CUDA (attention auto|flex); dense masks otherwise."""
        att = self.cfg.loss.attention
        if device.type == "cuda" and att in ("auto", "flex"):
            ok = _set_flex(student) and (self.teacher is None or _set_flex(self.teacher))
            if not ok and att == "flex":
                raise RuntimeError("attention='flex' requested but flex_attention could not be enabled")

    def __call__(self, model: torch.nn.Module, batch: BlockedBatch, ctx: StepContext) -> StepOutput:
        out = p1_loss(model, self.teacher, batch, self.cfg.loss)
        return StepOutput(loss=out.loss, weight=out.weight, metrics=out.metrics, tokens=batch.input_ids.numel())

    def state_dict(self) -> dict[str, Any]:
        return {"teacher_fingerprint": self._fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("teacher_fingerprint")
        if (
            saved is not None
            and self._fingerprint is not None
            and abs(saved - self._fingerprint) > 1e-6 * max(1.0, abs(saved))
        ):
            raise ValueError(
                f"the teacher differs from the one this checkpoint was trained with (fingerprint {self._fingerprint} "
                f"vs {saved}): build P1Step from the base model, not from a trained student"
            )

    def export(self, model: torch.nn.Module, path: str | os.PathLike) -> Path:
        """The student as an HF checkpoint with its tokenizer (`<MTP>` included; config.mtp_mask_token_id)."""
        return export_hf(model, path, self.tokenizer)


# --------------------------------------------------------------------------------------------- entry


def train_p1(
    loaded: Any,
    rows: Sequence[dict],
    p1_cfg: P1Config | dict,
    train_cfg: TrainConfig | dict,
    out_dir: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    mask_seed: int = 0,
    dist: Any = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train a P1 student from a `LoadedModel` (base weights) on (query, response) rows.

    Registers `<MTP>` (§4.1, `add_mask_token`), copies the teacher, tokenises the rows with the model's
    template, and runs the loop. Resumes from `out_dir/checkpoints` if a state is there.
    """
    from .mask_token import add_mask_token

    p1 = p1_cfg if isinstance(p1_cfg, P1Config) else P1Config.from_dict(p1_cfg)
    tc = train_cfg if isinstance(train_cfg, TrainConfig) else TrainConfig.from_dict(train_cfg)
    student, tok = loaded.model, loaded.tokenizer
    mask_id = add_mask_token(student, tok, seed=mask_seed, cov_scale=p1.mask_cov_scale)
    template = resolve_template(p1.template, loaded.chat_template)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else loaded.eos_ids[0]
    encoded = encode_examples(rows, tok, template, max_row_tokens(p1), p1.append_eos, pad_id)
    lengths = encoded.lengths
    log.info(
        "P1 data: %d rows, template %s, mean length %.1f tokens (%.0f%% end inside the window), the response "
        "starts at token %.1f on average (%d source tokens are read at k_min)",
        len(lengths),
        template,
        lengths.float().mean(),
        100 * (lengths <= max_row_tokens(p1)).float().mean(),
        encoded.response_start.float().mean(),
        max_row_tokens(p1) - 1,
    )
    step = P1Step(student, p1, tokenizer=tok)
    dev = resolve_device(device)
    step.prepare_student(student, dev)
    batches = P1Batches(encoded, p1, mask_id=mask_id, pad_id=pad_id)
    return train(step, student, batches, tc, out_dir, dist=dist, device=dev, callbacks=callbacks)


# -------------------------------------------------------------------------------------- launcher method `p1`


def _inputs(settings: dict) -> Inputs:
    """The base model and rows, and the seed of the `<MTP>` row (`mask_seed`)."""
    return load_model_and_rows(settings), {"mask_seed": int(settings.get("mask_seed", 0))}


LAUNCH = TrainingMethod(SETTINGS, train_p1, load=_inputs)
launch_entry = LAUNCH.entry
