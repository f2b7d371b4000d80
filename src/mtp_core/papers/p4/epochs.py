"""The length of a DMTD training in epochs (§3.1: "for 1 epoch ... a warmup ratio of 0.1"): `method.epochs`
passes over the rows the job keeps, instead of a fixed `train.max_steps`, and `method.warmup_ratio` the warm-up as a
share of the steps.

* **Steps** = ⌈epochs · rows / train.global_batch_size⌉, `rows` being what the job trains on after the overlong-row
  policy (`overlong: drop` removes rows, `truncate` keeps them) and the prompt filter (`train.sft.encode_rows` drops
  rows whose prompt fills `max_tokens`). The row stream (`train.loop.ShuffledOrder`) runs epoch after epoch without
  a gap, so the last step completes its batch with the first rows of the next epoch's order (at most
  global batch − 1 rows seen twice) rather than leaving as many unseen (⌈kept rows / 512⌉ for one epoch).
* **Warm-up** = ⌈warmup_ratio · steps⌉, replacing `train.warmup_steps` when `warmup_ratio` is set (any run length).

Exactly one of `train.max_steps` and `method.epochs` is set: the plan refuses neither and both, and a warm-up longer
than the run (for `max_steps` before any job, for `epochs` in the job once it has counted the rows, before the first
step). The launcher builds a `TrainConfig` before the job has counted anything: for an epoch-based run it sees
`max_steps` = `LAUNCHER_STEPS` (0: its progress line shows no total), which the job replaces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

LAUNCHER_STEPS = 0  # `train.max_steps` of an epoch-based run until its job counts the rows


def epoch_steps(rows: int, global_batch_size: int, epochs: float) -> int:
    """Optimiser steps of `epochs` passes over `rows` rows at `global_batch_size` rows per step (rounded up)."""
    if rows < 1 or global_batch_size < 1 or epochs <= 0:
        raise ValueError(f"epochs: {epochs} epoch(s) of {rows} row(s) at {global_batch_size} rows per step")
    return math.ceil(epochs * rows / global_batch_size)


def warmup_steps(steps: int, ratio: float) -> int:
    """⌈ratio · steps⌉."""
    return math.ceil(ratio * steps)


def length_choice_error(train: Mapping[str, Any], epochs: float | None) -> str | None:
    """Why `train` and `epochs` do not name one run length (neither or both), else None; `max_steps` =
    `LAUNCHER_STEPS` beside `epochs` is the launcher's placeholder, not a second length."""
    steps = train.get("max_steps")
    if epochs is None and steps is None:
        return "set train.max_steps or method.epochs (the run length)"
    if epochs is not None and steps not in (None, LAUNCHER_STEPS):
        return f"set train.max_steps ({steps}) or method.epochs ({epochs:g}), not both"
    return None


def length_error(steps: int, warmup: int) -> str | None:
    """Why a run of `steps` steps cannot have this warm-up, else None."""
    if warmup > steps > 0:
        return f"a warm-up of {warmup} steps > the run's {steps} steps: the learning rate would never reach train.lr"
    return None


def resolve_train(
    train: Mapping[str, Any], epochs: float | None, warmup_ratio: float | None, rows: int | None
) -> dict[str, Any]:
    """`train` with the run length resolved for `rows` kept rows: `max_steps` from `epochs`, `warmup_steps` from
    `warmup_ratio`, then checked (`length_choice_error`, `length_error`; ValueError naming the keys). `rows` None
    (the plan and the launcher, before the data is read): an epoch-based run gets `max_steps` `LAUNCHER_STEPS`,
    its length unchecked until the job counts its rows."""
    from ...train.config import TrainConfig  # the defaults of absent keys (`mtp_core.train` imports torch)

    why = length_choice_error(train, epochs)
    if why:
        raise ValueError(why)
    out = dict(train)
    if epochs is not None:
        if rows is None:
            return {**out, "max_steps": LAUNCHER_STEPS}
        out["max_steps"] = epoch_steps(rows, int(out.get("global_batch_size", TrainConfig.global_batch_size)), epochs)
    if warmup_ratio is not None:
        out["warmup_steps"] = warmup_steps(int(out["max_steps"]), warmup_ratio)
    why = length_error(int(out["max_steps"]), int(out.get("warmup_steps", TrainConfig.warmup_steps)))
    if why:
        length = f"train.max_steps {out['max_steps']}" if epochs is None else f"method.epochs {epochs:g} of {rows} rows"
        raise ValueError(f"{length}: {why}")
    return out
