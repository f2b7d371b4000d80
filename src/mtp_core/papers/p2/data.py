"""Paper 2's training data: fixed windows of the pipeline's token shards (§4.1: pretraining text, FineWeb-Edu at
paper scale), and the feature cache that runs a frozen trunk once for every run that shares it.

**Windows.** The stream of a `pretrain_text` dataset is cut into non-overlapping windows of `seq_len` tokens
(documents packed with their EOS separators; cross-document targets are not masked). The last `val_tokens`
tokens are held out: the validation windows, unless the section names a `validation_dataset`, whose stream's first
windows are then read instead (`validation_rows`: text the trunk never saw, where the training stream renders the
rows a fine-tuned trunk was trained on). Training reads window `order[r]` at stream position r, with
`ShuffledOrder(n_train, seed)` (a pure function of the seed, so any process reads any row and a resumed run reads
what an uninterrupted one would).

**Feature cache.** With a frozen trunk (or all but its last `layer`s frozen), a run needs only the trunk's hidden
state at the first trained layer of each window: `features(layer)` = the input of decoder layer `layer` (the
post-final-norm state h^0 for layer = L, i.e. a fully frozen trunk). Runs with the same model, dataset,
`seq_len`, window seed and layer read the same stream positions, so one job computes the rows 0 .. n-1 that the
longest of them needs (`h.npy` [n, seq_len, d] float32, memory-mapped, with `index.json`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...data.shards import TokenShards
from ...io import atomic_dir
from ...models.heads.store import trunk_fingerprint
from ...train.loop import ShuffledOrder

FEATURES, FEATURE_INDEX = "h.npy", "index.json"


class Windows:
    """Training and validation windows of a shard stream (module docstring)."""

    def __init__(self, shards: TokenShards, seq_len: int, val_tokens: int, seed: int = 0):
        total = len(shards)
        if seq_len < 2 or val_tokens < seq_len or total - val_tokens < seq_len:
            raise ValueError(
                f"{shards.index_path}: {total} tokens cannot hold validation windows of {val_tokens} tokens and "
                f"training windows of seq_len {seq_len}"
            )
        self.shards, self.seq_len, self.val_tokens = shards, int(seq_len), int(val_tokens)
        self.n_train = (total - val_tokens) // seq_len
        self.n_val = val_tokens // seq_len
        self.order = ShuffledOrder(self.n_train, seed=seed)

    def train_rows(self, start: int, size: int) -> np.ndarray:
        """[size, seq_len] token ids of the windows at stream positions start .. start + size - 1."""
        idx = self.order.indices(start, size)
        return np.stack([self.shards.read(int(i) * self.seq_len, self.seq_len) for i in idx])

    def val_rows(self, n: int | None = None) -> np.ndarray:
        """[n, seq_len] the first n validation windows (all by default; more than there are is an error)."""
        return _stream_windows(self.shards, len(self.shards) - self.val_tokens, self.n_val, self.seq_len, n)


def _stream_windows(shards: TokenShards, base: int, available: int, seq_len: int, n: int | None) -> np.ndarray:
    """[n, seq_len] consecutive windows of `shards` from token `base` (all `available` ones by default)."""
    n = available if n is None else int(n)
    if n > available:
        raise ValueError(f"{shards.index_path}: {n} validation windows of {seq_len} tokens asked, {available} there")
    return np.stack([shards.read(base + i * seq_len, seq_len) for i in range(n)])


def validation_rows(
    spec: Mapping[str, Any], shards: str | os.PathLike, validation: str | os.PathLike | None
) -> np.ndarray:
    """The validation windows of `spec` (`P2Plan.windows_spec`: seq_len, val_tokens, window_seed, windows): the
    first `windows` windows of the `validation` dataset's shards (index.json) when the section names one, else the
    held-out tail of the training stream `shards`."""
    seq_len, n = int(spec["seq_len"]), int(spec["windows"])
    if validation is not None:
        stream = TokenShards(validation)
        return _stream_windows(stream, 0, len(stream) // seq_len, seq_len, n)
    return Windows(TokenShards(shards), seq_len, int(spec["val_tokens"]), int(spec["window_seed"])).val_rows(n)


@torch.inference_mode()
def trunk_features(trunk: torch.nn.Module, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """The input of decoder layer `layer` on windows `ids` [B, S]; `layer` = L gives the post-norm h^0."""
    out = trunk.model(input_ids=ids, output_hidden_states=True)
    return out.hidden_states[layer]  # hs[i] = output of layer i-1 (i < L); hs[L] = post-norm


def write_features(
    trunk: torch.nn.Module,
    windows: Windows,
    rows: int,
    layer: int,
    out_dir: str | os.PathLike,
    batch_size: int = 8,
    describe: dict | None = None,
) -> Path:
    """Features of stream positions 0 .. rows-1 into `out_dir` (atomically): `h.npy` and `index.json` (rows,
    seq_len, layer, the trunk's fingerprint and `describe`)."""
    dev = next(trunk.parameters()).device
    hidden = trunk.config.hidden_size
    with atomic_dir(out_dir) as tmp:
        arr = np.lib.format.open_memmap(
            Path(tmp) / FEATURES, mode="w+", dtype=np.float32, shape=(rows, windows.seq_len, hidden)
        )
        for start in range(0, rows, batch_size):
            n = min(batch_size, rows - start)
            ids = torch.from_numpy(windows.train_rows(start, n)).to(dev)
            arr[start : start + n] = trunk_features(trunk, ids, layer).float().cpu().numpy()
        arr.flush()
        del arr
        meta = {
            "rows": rows,
            "seq_len": windows.seq_len,
            "layer": layer,
            "hidden_size": hidden,
            "fingerprint": trunk_fingerprint(trunk),
            **(describe or {}),
        }
        (Path(tmp) / FEATURE_INDEX).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return Path(out_dir)


@dataclass
class FeatureCache:
    """A feature directory, memory-mapped; `rows(start, size)` are the features of those stream positions."""

    path: Path
    meta: dict
    data: np.ndarray

    @classmethod
    def open(cls, path: str | os.PathLike, trunk: torch.nn.Module, seq_len: int, layer: int, rows: int) -> FeatureCache:
        """Open and check against what a run needs (its trunk's fingerprint, seq_len, layer, rows)."""
        path = Path(path)
        meta = json.loads((path / FEATURE_INDEX).read_text())
        want = {"seq_len": seq_len, "layer": layer, "fingerprint": trunk_fingerprint(trunk)}
        bad = {k: (meta.get(k), v) for k, v in want.items() if meta.get(k) != v}
        if bad:
            raise ValueError(f"{path}: features of another trunk or layout ({bad}: (cached, wanted))")
        if meta["rows"] < rows:
            raise ValueError(f"{path}: {meta['rows']} rows of features, the run reads {rows}")
        return cls(path, meta, np.load(path / FEATURES, mmap_mode="r"))

    def rows(self, start: int, size: int) -> torch.Tensor:
        return torch.from_numpy(np.array(self.data[start : start + size], dtype=np.float32))
