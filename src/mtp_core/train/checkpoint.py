"""Resumable training states and HF exports of trained models, all written atomically.

Layout under a run's `out_dir`:
```
checkpoints/step-00001000/state.pt   model, optimiser, scheduler, step-function state, step, tokens, config
checkpoints/step-00001000/rng-0.pt   RNG states of rank 0 (python, numpy, torch CPU, CUDA), one file per rank
checkpoints/step-00001000/meta.json  step, time, config (readable)
exports/step-00000500/               HF checkpoint at a configured step (kept; training-dynamics figures)
model/                               the final HF checkpoint (AutoModelForCausalLM.from_pretrained + tokenizer)
```
A state directory is written under a temporary name and renamed when complete, so a directory named
`step-*` is always whole and `latest_checkpoint` can trust it after any kill. The data position is the step
itself: batch sources are indexed by (step, micro-batch), so no iterator state needs saving.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..io import atomic_dir
from .config import step_dir_name

log = logging.getLogger(__name__)
_STEP_DIR = re.compile(r"^step-(\d+)$")


# ------------------------------------------------------------------------------------------------- RNG


def rng_state() -> dict[str, Any]:
    """Every RNG the loop or a step function may draw from (weights_only-loadable types)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------------------ train states


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, dir) of every complete state under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "state.pt").is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    state: dict[str, Any],
    *,
    rank: int = 0,
    is_main: bool = True,
    barrier: Any = None,
    keep_last: int = 1,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write `state` (main process) and this rank's RNG state into `root/step-N`, atomically; prune old ones.

    Multi-process: every rank calls this; `barrier` (a callable) separates directory creation, the per-rank
    writes and the rename.
    """
    root = Path(root)
    final = root / step_dir_name(step)
    tmp = root / f".{step_dir_name(step)}.tmp"
    sync = barrier or (lambda: None)
    if is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    sync()
    torch.save(rng_state(), tmp / f"rng-{rank}.pt")
    if is_main:
        torch.save(state, tmp / "state.pt")
        (tmp / "meta.json").write_text(
            json.dumps({"step": step, "saved_at": time.time(), **(meta or {})}, indent=2, default=str) + "\n"
        )
    sync()
    if is_main:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for _, old in list_checkpoints(root)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in root.glob(".step-*.tmp"):  # left by a run killed while saving
            shutil.rmtree(stale, ignore_errors=True)
        log.info("saved training state %s", final)
    sync()
    return final


def load_checkpoint(path: str | os.PathLike, rank: int = 0, map_location: Any = "cpu") -> tuple[dict, dict | None]:
    """(state, this rank's RNG state or None) of a state directory."""
    path = Path(path)
    state = torch.load(path / "state.pt", map_location=map_location, weights_only=True)
    rng_file = path / f"rng-{rank}.pt"
    rng = torch.load(rng_file, map_location="cpu", weights_only=True) if rng_file.exists() else None
    return state, rng


# ------------------------------------------------------------------------------------------- HF exports


def export_hf(model: Any, path: str | os.PathLike, tokenizer: Any | None = None) -> Path:
    """Save an HF checkpoint (safetensors + config [+ tokenizer]) at `path`, atomically (temp dir + rename).

    The result loads with `AutoModelForCausalLM.from_pretrained(path)` (and `AutoTokenizer`), special tokens
    such as `<MTP>` included.
    """
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return Path(path)
