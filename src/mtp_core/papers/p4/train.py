"""Paper 4's training (§2.1, §3.1): parallel training with cyclical masking, as a step of the one training loop.

A DMTD step *is* the fine-tune's step (`train.sft`: rows rendered with the model's template, response-only loss by
default, micro-batches packed with position ids restarting at every row) run inside `split.dmtd_hooks`: the model's
own forward computes Eqs. 1-5 and the loss is the plain next-token CE of Eq. 6. One pass trains every execution
path (late-only steps at offsets 1..τ-1, the cycle start at offset 0); gradients reach the thinking layers only
through M = 1 columns; the FLOPs are those of one vanilla step.

Resolved choices: M from the token's position in its row (the official `arange(seq_len) %
mtp_horizon`, `phase: row`; `phase: random` draws a per-row offset from (seed, step, micro-batch), mimicking the
official packing, so every phase is trained); all parameters trained (`train_embeddings: true`; `false` freezes
the embeddings and LM head as the official `sft.py`); loss on the response (`loss_on`); rows beyond
`max_tokens` truncated or, as the official exporter, dropped (`overlong`); `gradient_checkpointing`
non-reentrant (the official sft.py's); the run length `train.max_steps` or, as the paper, `epochs` of the rows kept
with a `warmup_ratio` (§3.1; `epochs` module); float32 master weights whatever dtype the model was loaded in
(the loop's `train.param_dtype`).

The checkpoint records `config.dmtd = {encoding_layers, decoding_layers, combine, cycle, version}` and loads with
plain `AutoModelForCausalLM` (no remote code); the `dmtd` decoder reads its defaults from it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ...data.rows import resolve_template
from ...decoding import layers as L
from ...train.config import TrainConfig
from ...train.launch.methods import TrainingMethod
from ...train.loop import StepContext, StepOutput, TrainResult, train
from ...train.losses import token_cross_entropy
from ...train.sft import SFTBatches, SFTStep, encode_rows, response_logits
from .cyclic import training_offsets
from .epochs import resolve_train
from .settings import CONFIG_KEY, SETTINGS, DMTDConfig
from .split import dmtd_hooks

log = logging.getLogger(__name__)


def encode_p4_rows(rows: Sequence[dict], tokenizer: Any, cfg: DMTDConfig, template: str) -> list[tuple[list[int], int]]:
    """`train.sft.encode_rows` under the `overlong` policy: truncate to `max_tokens`, or drop longer rows (counted)."""
    if cfg.overlong == "truncate":
        return encode_rows(rows, tokenizer, cfg, template)
    whole = encode_rows(rows, tokenizer, replace(cfg, max_tokens=sys.maxsize), template)
    kept = [(ids, start) for ids, start in whole if len(ids) <= cfg.max_tokens]
    if len(kept) < len(whole):
        log.warning(
            "P4 data: %d of %d row(s) longer than max_tokens %d dropped",
            len(whole) - len(kept),
            len(whole),
            cfg.max_tokens,
        )
    if not kept:
        raise ValueError(f"p4: no row fits max_tokens {cfg.max_tokens} (overlong: drop)")
    return kept


def metric_names(cycle: int) -> tuple[str, ...]:
    """The step's CSV columns: supervised tokens, then CE and top-1 accuracy by cycle offset j = 0..τ-1."""
    return ("sft_tokens", *(f"ce@{j}" for j in range(cycle)), *(f"acc@{j}" for j in range(cycle)))


class P4Step(SFTStep):
    """The DMTD step: the SFT loss with the cyclical mask M inside the model's forward, and per-offset metrics from
    the same logits."""

    def __init__(self, tokenizer: Any, cfg: DMTDConfig):
        super().__init__(tokenizer)
        self.cfg, self.spec = cfg, cfg.spec
        self.metric_names = metric_names(cfg.cycle)

    def row_offsets(self, rows: int, step: int, chunk: int) -> torch.Tensor | None:
        """Per-row phase offsets of micro-batch (step, chunk) under `phase: random` (None under `phase: row`): a pure
        function of (seed, step, chunk), so a resumed run draws what an uninterrupted one drew."""
        if self.cfg.phase == "row":
            return None
        rng = np.random.default_rng([self.cfg.seed, step, chunk])
        return torch.from_numpy(rng.integers(0, self.cfg.cycle, size=rows))

    def __call__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], ctx: StepContext) -> StepOutput:
        rows = batch["rows"]
        offsets = self.row_offsets(int(rows.max()) + 1, ctx.step, ctx.chunk)
        if offsets is not None:
            offsets = offsets.to(rows.device)[rows.clamp(min=0)]  # per token of the packed rows
        j_of = training_offsets(batch["position_ids"], self.cfg.cycle, offsets)
        with dmtd_hooks(model, self.spec, j_of == 0):
            out = response_logits(model, batch)
        ce = token_cross_entropy(out.logits, out.targets)
        metrics: dict[str, Any] = {"sft_tokens": (float(len(out.targets)), 1.0)}
        with torch.no_grad():
            hit = out.logits.argmax(-1) == out.targets
            j_sup = j_of[out.supervised]
            for j in range(self.cfg.cycle):
                sel = j_sup == j
                n = float(sel.sum())
                metrics[f"ce@{j}"] = (ce.detach()[sel].sum(), n)
                metrics[f"acc@{j}"] = (hit[sel].sum().float(), n)
        return StepOutput(
            loss=ce.mean(), weight=float(len(out.targets)), metrics=metrics, tokens=int((rows >= 0).sum())
        )


def prepare_model(model: torch.nn.Module, cfg: DMTDConfig) -> None:
    """Check the split against the model, record the split in `config.dmtd` (every export carries it), freeze the
    embeddings and head unless `train_embeddings`, and turn on non-reentrant gradient checkpointing if asked. The
    loop holds float32 master weights whatever dtype the model was loaded in (`TrainConfig.param_dtype`: the
    official ZeRO-3 bf16 runs keep float32 masters); exports hold them, loaders cast to the declared dtype."""
    L.check_supported(model)
    try:
        cfg.spec.check(L.num_layers(model))
    except ValueError as e:
        raise ValueError(f"p4.method: {e}") from None
    setattr(model.config, CONFIG_KEY, cfg.spec.as_config(cfg.cycle))
    if not cfg.train_embeddings:
        model.get_input_embeddings().requires_grad_(False)
        model.get_output_embeddings().requires_grad_(False)
    if cfg.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.24; the older name before
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def train_p4(
    loaded: Any,
    rows: Sequence[dict],
    p4_cfg: DMTDConfig | dict,
    train_cfg: TrainConfig | dict,
    out_dir: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    dist: Any = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train `loaded.model` (its base weights) with DMTD on (query, response) rows for `train.max_steps` steps or
    `p4.epochs` epochs of the rows kept (`epochs.resolve_train`); resumes from `out_dir/checkpoints`; the final
    model (with `config.dmtd`) in `out_dir/model`."""
    cfg = p4_cfg if isinstance(p4_cfg, DMTDConfig) else DMTDConfig.from_dict(p4_cfg)
    train_keys = train_cfg.as_dict() if isinstance(train_cfg, TrainConfig) else dict(train_cfg)
    model, tok = loaded.model, loaded.tokenizer
    prepare_model(model, cfg)
    template = resolve_template(cfg.template, loaded.chat_template)
    examples = encode_p4_rows(rows, tok, cfg, template)
    tc = TrainConfig.from_dict(resolve_train(train_keys, cfg.epochs, cfg.warmup_ratio, len(examples)))
    log.info(
        "P4 data: %d rows, template %s, loss on %s; split %s, training τ %d, combine %s, phase %s; %d steps of %d "
        "rows (%s), warm-up %d",
        len(examples),
        template,
        cfg.loss_on,
        cfg.spec.name,
        cfg.cycle,
        cfg.combine,
        cfg.phase,
        tc.max_steps,
        tc.global_batch_size,
        "train.max_steps" if cfg.epochs is None else f"{cfg.epochs:g} epoch(s)",
        tc.warmup_steps,
    )
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else loaded.eos_ids[0]
    return train(
        P4Step(tok, cfg),
        model,
        SFTBatches(examples, pad_id, cfg),
        tc,
        out_dir,
        dist=dist,
        device=device,
        callbacks=callbacks,
    )


# -------------------------------------------------------------------------------------- launcher method `p4`


LAUNCH = TrainingMethod(SETTINGS, train_p4)
launch_entry = LAUNCH.entry
