"""THE training loop of every paper: a method is a step function, the loop does everything else.

```
train(step_fn, model, batches, cfg, out_dir, dist=LocalDist())
```
* `model`: the trainable `nn.Module` (an HF causal LM for P1, P4; the heads module for P2/P5 ...). The loop
  moves it to the device, wraps it with `dist.wrap` (identity, DDP or FSDP2, `dist.py`), then builds AdamW
  over its trainable parameters (`optim.param_groups`; after wrapping, since FSDP2 replaces the parameters)
  and the warm-up schedule. Frozen modules a step function holds (`frozen_modules`: attribute names,
  default `("teacher",)` where present) go through `dist.wrap_frozen` (never trained; under FSDP2 its layers
  sharded, the rest whole on every rank).
* `batches`: a `BatchSource`, `micro_batch(MicroBatchSpec) -> batch`. A micro-batch is named by its step and
  its global index `chunk` in that step (0 .. global/micro - 1, whatever the process count) and the position
  `start = step * global + chunk * micro` of its first row in the source's infinite row stream. Sources are
  pure functions of the spec (`ShuffledOrder` gives epoch-wise permutations), which makes the data position
  = the step: resume needs no iterator state, and the data of a step does not depend on the process count.
* `step_fn(wrapped_model, batch, ctx) -> StepOutput(loss, weight, metrics, tokens)`: the method. `loss` is the
  micro-batch's mean loss with its graph, `weight` the number of units it averages over (supervised tokens),
  `metrics` name -> (sum, count) (or a float, counted once), `tokens` the input tokens it consumed. Optional
  attributes: `metric_names` (CSV columns), `setup(device, dist)` (move frozen parts, e.g. P1's teacher),
  `state_dict()` / `load_state_dict()` (saved in checkpoints), `export(model, path)` (HF export with its
  tokenizer).

Per optimiser step: for each of this process's micro-batches (in `dist.no_sync` except the last; under
autocast if `precision` says so) `backward(loss * w)` with w = weight (`loss_weighting="tokens"`) or 1
(`"micro_batch"`, the official `loss / grad_accum`); then the gradients are scaled by world / sum(w) over all
processes, so the update is that of the mean over the global batch whatever the micro-batch split; clip to
`grad_clip` (the norm before clipping is logged); AdamW; LR schedule. Then: one CSV row (flushed; its `weight`
is sum(w): supervised units under `tokens`, micro-batches under `micro_batch`), a resumable state every
`checkpoint_every` steps after the HF export at each of `save_steps` (a run killed between the two redoes the
step and its export), callbacks: a callback may return `SAVE` (a resumable state now, e.g. a wall-clock
interval) or raise `StopTraining` (a resumable state now, then the exception propagates: how the launcher stops
at a step boundary on preemption); in a process group every rank's callbacks must decide alike (the launcher's
callback all-reduces its flags). Resume restores model, optimiser, scheduler, step-function state, RNG states, the
step and the autocast `auto` chose (whatever the machine), and truncates the CSV to that step: a run killed and
started again ends with the weights of one never killed, bit for bit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..io import atomic_write_json
from .checkpoint import export_hf, latest_checkpoint, load_checkpoint, save_checkpoint, set_rng_state
from .config import TrainConfig, step_dir_name
from .curves import CurveWriter, curve_means
from .dist import LocalDist
from .optim import build_optimizer, build_scheduler

log = logging.getLogger(__name__)

SAVE = "save"  # a callback's return value asking for a resumable state at this step


class StopTraining(Exception):
    """Raised by a callback to stop at this step boundary: the loop saves a resumable state, then re-raises."""


BASE_COLUMNS = ["step", "lr", "loss", "grad_norm", "weight", "tokens", "tokens_total", "step_s", "elapsed_s"]
WALL_CLOCK_COLUMNS = ("step_s", "elapsed_s")


@dataclass(frozen=True)
class MicroBatchSpec:
    """Which micro-batch to build: step (0-based), global index `chunk` in the step, first row `start`, rows."""

    step: int
    chunk: int
    start: int
    size: int


@runtime_checkable
class BatchSource(Protocol):
    def micro_batch(self, spec: MicroBatchSpec) -> Any: ...


@dataclass
class StepContext:
    """What a step function may want to know about where it runs."""

    step: int
    chunk: int
    micro_index: int
    n_micro: int
    device: torch.device
    rank: int = 0
    world_size: int = 1
    autocast_dtype: torch.dtype | None = None


@dataclass
class StepOutput:
    loss: torch.Tensor
    weight: float = 1.0
    metrics: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0


class StepFn(Protocol):
    def __call__(self, model: torch.nn.Module, batch: Any, ctx: StepContext) -> StepOutput: ...


@dataclass
class TrainResult:
    steps: int
    resumed_from: int
    tokens_total: int
    final_dir: Path | None
    last_row: dict[str, Any]
    elapsed_s: float
    metric_means: dict[str, float | None] = field(default_factory=dict)  # each metric's mean over the run's steps


class ShuffledOrder:
    """Row indices of an infinite stream over `n` rows: epoch e is permutation(seed, e) of 0..n-1.

    `indices(start, size)` is a pure function (cached per epoch), so any process can read any stretch of
    the stream and the position in it is all the state there is.
    """

    def __init__(self, n: int, seed: int = 0, shuffle: bool = True):
        if n < 1:
            raise ValueError("cannot draw batches from an empty dataset")
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self._cache: dict[int, np.ndarray] = {}

    def epoch(self, e: int) -> np.ndarray:
        if e not in self._cache:
            if len(self._cache) > 4:
                self._cache.clear()
            perm = np.random.default_rng([self.seed, e]).permutation(self.n) if self.shuffle else np.arange(self.n)
            self._cache[e] = perm
        return self._cache[e]

    def indices(self, start: int, size: int) -> np.ndarray:
        pos = np.arange(start, start + size)
        epochs, offs = np.divmod(pos, self.n)
        out = np.empty(size, dtype=np.int64)
        for e in np.unique(epochs):  # at most a few epochs per micro-batch
            sel = epochs == e
            out[sel] = self.epoch(int(e))[offs[sel]]
        return out


def to_device(batch: Any, device: torch.device) -> Any:
    if hasattr(batch, "to") and not isinstance(batch, (list, tuple, dict)):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 matrices in hardware: CUDA, or a CPU with AVX512-BF16 or AMX tiles. Elsewhere
    a CPU emulates bf16 GEMMs, slower than fp32's."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The step's autocast dtype (None: none). `auto` is the papers' bf16 mixed precision where the device computes
    bf16 natively (`native_bf16`) and fp32 elsewhere (decision 0033)."""
    if precision == "bf16" or (precision == "auto" and native_bf16(device)):
        return torch.bfloat16
    return None


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return str(dtype).removeprefix("torch.") if dtype else None


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _metric_pair(v: Any) -> tuple[torch.Tensor | float, float]:
    if isinstance(v, tuple):
        return v[0], float(v[1])
    return v, 1.0


def _columns(step_fn: Any) -> list[str]:
    names = list(getattr(step_fn, "metric_names", None) or [])
    return BASE_COLUMNS + [n for n in names if n not in BASE_COLUMNS]


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Hold `model`'s floating-point parameters in `dtype` (exactly, when upcasting); buffers keep theirs (RoPE's
    float32 inverse frequencies stay float32 in a bf16 model)."""
    cast = [p for p in model.parameters() if p.is_floating_point() and p.dtype != dtype]
    if cast:
        log.info("training parameters held in %s (%d tensors were %s)", dtype, len(cast), cast[0].dtype)
    for p in cast:
        p.data = p.data.to(dtype)


def train(
    step_fn: StepFn,
    model: torch.nn.Module,
    batches: BatchSource,
    cfg: TrainConfig,
    out_dir: str | os.PathLike,
    *,
    dist: Any = None,
    device: str | torch.device | None = None,
    export_fn: Callable[[torch.nn.Module, Path], Any] | None = None,
    callbacks: Sequence[Callable[[int, dict[str, Any]], Any]] = (),
) -> TrainResult:
    """Train `model` with `step_fn` on `batches` for `cfg.max_steps` optimiser steps (module docstring).

    Writes `out_dir/curves.csv`, `out_dir/checkpoints/`, `out_dir/exports/step-N/` (cfg.save_steps),
    `out_dir/<cfg.final_dir>/` (final HF export) and `out_dir/train_summary.json`. `callbacks(step, row)` run
    after each step's row and checkpoint (a raising callback stops training: how tests simulate a kill).
    """
    t_start = time.perf_counter()
    dist = dist or LocalDist()
    out_dir = Path(out_dir)
    ckpt_root = out_dir / "checkpoints"
    dev = resolve_device(device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    n_micro = cfg.accumulation(dist.world_size)
    chunk0 = dist.rank * n_micro
    ac_dtype = autocast_dtype(cfg.precision, dev)

    model.to(dev)
    cast_parameters(model, getattr(torch, cfg.param_dtype))  # the master weights (TrainConfig.param_dtype)
    model.train()
    if hasattr(step_fn, "setup"):
        step_fn.setup(dev, dist)
    for name in getattr(step_fn, "frozen_modules", ("teacher",)):
        if getattr(step_fn, name, None) is not None and hasattr(dist, "wrap_frozen"):
            setattr(step_fn, name, dist.wrap_frozen(getattr(step_fn, name)))
    wrapped = dist.wrap(model)  # before the optimiser: FSDP2 replaces the parameters by sharded ones
    plain = dist.unwrap(wrapped)
    optimizer = build_optimizer(plain, cfg, dev)
    scheduler = build_scheduler(optimizer, cfg)
    params = [p for g in optimizer.param_groups for p in g["params"]]

    start, tokens_total, resumed_from = 0, 0, 0
    ckpt = latest_checkpoint(ckpt_root) if cfg.resume else None
    if ckpt is not None:
        state, rng = load_checkpoint(ckpt, dist.rank)
        dist.load_model_state_dict(wrapped, state["model"])
        dist.load_optim_state_dict(wrapped, optimizer, state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if hasattr(step_fn, "load_state_dict") and state.get("step_fn") is not None:
            step_fn.load_state_dict(state["step_fn"])
        for key in ("global_batch_size", "micro_batch_size", "seed"):
            if state.get("config", {}).get(key, getattr(cfg, key)) != getattr(cfg, key):
                log.warning(
                    "resuming %s with %s=%s (checkpoint has %s): data order changes",
                    ckpt,
                    key,
                    getattr(cfg, key),
                    state["config"][key],
                )
        if cfg.precision == "auto" and state.get("autocast", _dtype_name(ac_dtype)) != _dtype_name(ac_dtype):
            log.warning("resuming %s under the autocast it began with, %s, not this device's", ckpt, state["autocast"])
            ac_dtype = getattr(torch, state["autocast"]) if state["autocast"] else None  # `auto` resolves once
        start = resumed_from = int(state["step"])
        tokens_total = int(state.get("tokens_total", 0))
        if rng is not None:
            set_rng_state(rng)
        log.info("resumed from %s (step %d)", ckpt, start)
    else:
        _seed_all(cfg.seed + dist.rank)

    exporter = export_fn or getattr(step_fn, "export", None) or (lambda m, p: export_hf(m, p))
    columns = _columns(step_fn)
    metric_cols = columns[len(BASE_COLUMNS) :]
    curves = (
        CurveWriter(out_dir / "curves.csv", columns, resume_step=start if ckpt is not None else None)
        if dist.is_main
        else None
    )

    def save_state(step: int) -> None:
        state = {
            "step": step,
            "tokens_total": tokens_total,
            "model": dist.model_state_dict(wrapped),
            "optimizer": dist.optim_state_dict(wrapped, optimizer),
            "scheduler": scheduler.state_dict(),
            "step_fn": step_fn.state_dict() if hasattr(step_fn, "state_dict") else None,
            "config": cfg.as_dict(),
            "autocast": _dtype_name(ac_dtype),
        }
        save_checkpoint(
            ckpt_root,
            step,
            state,
            rank=dist.rank,
            is_main=dist.is_main,
            barrier=dist.barrier,
            keep_last=cfg.keep_last,
            meta={"tokens_total": tokens_total, "config": cfg.as_dict()},
        )

    def export(step: int | None) -> Path | None:
        path = out_dir / (cfg.final_dir if step is None else f"exports/{step_dir_name(step)}")
        with dist.exportable(wrapped) if hasattr(dist, "exportable") else contextlib.nullcontext(plain) as full:
            if dist.is_main:
                full.eval()
                exporter(full, path)
                full.train()
                log.info("exported %s", path)
        dist.barrier()
        return path

    if start == 0 and 0 in cfg.save_steps:
        export(0)

    bar = None
    if cfg.progress and dist.is_main and start < cfg.max_steps:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.max_steps, initial=start, desc=f"train {out_dir.name}", unit="step", dynamic_ncols=True)

    row: dict[str, Any] = {}
    last_saved = start if ckpt is not None else -1
    t_loop = time.perf_counter()
    try:
        for step in range(start, cfg.max_steps):
            t0 = time.perf_counter()
            lr = scheduler.get_last_lr()[0]
            optimizer.zero_grad(set_to_none=True)
            loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
            weight_sum = torch.zeros((), dtype=torch.float64, device=dev)
            tokens = 0
            msum = torch.zeros(len(metric_cols), dtype=torch.float64, device=dev)
            mcnt = torch.zeros(len(metric_cols), dtype=torch.float64, device=dev)
            for i in range(n_micro):
                chunk = chunk0 + i
                spec = MicroBatchSpec(
                    step=step,
                    chunk=chunk,
                    start=step * cfg.global_batch_size + chunk * cfg.micro_batch_size,
                    size=cfg.micro_batch_size,
                )
                batch = to_device(batches.micro_batch(spec), dev)
                ctx = StepContext(
                    step=step,
                    chunk=chunk,
                    micro_index=i,
                    n_micro=n_micro,
                    device=dev,
                    rank=dist.rank,
                    world_size=dist.world_size,
                    autocast_dtype=ac_dtype,
                )
                with dist.no_sync(wrapped, last=i == n_micro - 1):
                    ac = torch.autocast(dev.type, dtype=ac_dtype) if ac_dtype else contextlib.nullcontext()
                    with ac:
                        out = step_fn(wrapped, batch, ctx)
                    w = float(out.weight) if cfg.loss_weighting == "tokens" else 1.0
                    (out.loss * w).backward()
                loss_sum += out.loss.detach().double() * w
                weight_sum += w
                tokens += int(out.tokens)
                for name, v in out.metrics.items():
                    if name in metric_cols:
                        j = metric_cols.index(name)
                        num, den = _metric_pair(v)
                        msum[j] += torch.as_tensor(num, dtype=torch.float64, device=dev)
                        mcnt[j] += den
            packed = dist.all_reduce_sum(
                torch.cat(
                    [
                        torch.stack(
                            [loss_sum, weight_sum, torch.tensor(float(tokens), dtype=torch.float64, device=dev)]
                        ),
                        msum,
                        mcnt,
                    ]
                )
            )
            g_loss, g_weight, g_tokens = packed[0], packed[1], int(packed[2].item())
            scale = dist.world_size / max(float(g_weight), 1e-12)  # DDP averaged over ranks; undo, divide by total
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, scale)
            clip = cfg.grad_clip if cfg.grad_clip and cfg.grad_clip > 0 else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
            grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
            if math.isfinite(grad_norm):
                optimizer.step()
            else:
                log.warning("step %d: non-finite gradient norm, update skipped", step + 1)
            scheduler.step()
            tokens_total += g_tokens
            done = step + 1
            now = time.perf_counter()
            row = {
                "step": done,
                "lr": lr,
                "loss": float(g_loss / max(float(g_weight), 1e-12)),
                "grad_norm": grad_norm,
                "weight": float(g_weight),
                "tokens": g_tokens,
                "tokens_total": tokens_total,
                "step_s": now - t0,
                "elapsed_s": now - t_loop,
            }
            m = packed[3:].tolist()
            nm = len(metric_cols)
            for j, name in enumerate(metric_cols):
                row[name] = m[j] / m[nm + j] if m[nm + j] else None
            if curves is not None:
                curves.write(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}")
            if dist.is_main and cfg.log_every and (done % cfg.log_every == 0 or done == cfg.max_steps):
                log.info(
                    "step %d/%d loss %.4f lr %.3g grad_norm %.3g tokens %d",
                    done,
                    cfg.max_steps,
                    row["loss"],
                    lr,
                    grad_norm,
                    tokens_total,
                )
            if done in cfg.save_steps:  # before the state: a run killed in between redoes the step and its export
                export(done)
            if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.max_steps:
                save_state(done)
                last_saved = done
            for cb in callbacks:
                try:
                    ask = cb(done, row)
                except StopTraining:
                    if last_saved != done:
                        save_state(done)
                    log.info("stopped at step %d (resumable state saved)", done)
                    raise
                if ask == SAVE and last_saved != done and done < cfg.max_steps:
                    save_state(done)
                    last_saved = done
        end = max(start, cfg.max_steps)
        if last_saved != end:
            save_state(end)
        final = export(None)
    finally:
        if bar is not None:
            bar.close()
        if curves is not None:
            curves.close()
    elapsed = time.perf_counter() - t_start
    means = curve_means(out_dir / "curves.csv", metric_cols) if dist.is_main else {}
    if dist.is_main:
        atomic_write_json(
            out_dir / "train_summary.json",
            {
                "steps": cfg.max_steps,
                "resumed_from": resumed_from,
                "tokens_total": tokens_total,
                "elapsed_s": elapsed,
                "final_dir": str(final),
                "last_row": row,
                "metric_means": means,
                "config": cfg.as_dict(),
                "device": str(dev),
                "autocast": _dtype_name(ac_dtype),
                "world_size": dist.world_size,
            },
        )
    return TrainResult(
        steps=cfg.max_steps,
        resumed_from=resumed_from,
        tokens_total=tokens_total,
        final_dir=final,
        last_row=row,
        elapsed_s=elapsed,
        metric_means=means,
    )
