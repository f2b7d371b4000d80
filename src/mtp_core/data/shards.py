"""Pretraining token shards: a writer (documents -> raw token files + index.json) and a memmap reader.

Layout of a shard directory:
    shard_00000.bin, shard_00001.bin, ...   raw token ids, one dtype (uint16 if the vocabulary fits, else
                                            uint32), `shard_tokens` tokens each (the last may be shorter);
                                            documents follow each other, each followed by the EOS id, and
                                            may continue across shard boundaries
    index.json                              dtype, vocab_size, eos_id, tokenizer, source, per-shard file /
                                            tokens / docs (documents that end in the shard), totals, and the
                                            read report of the text source (skipped bad rows)
Shards are written under temporary names and renamed at the end; index.json is written last, so its
presence means a complete set.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..io import ReadReport, atomic_write_json

log = logging.getLogger(__name__)
INDEX_NAME = "index.json"
SHARD_PATTERN = "shard_{:05d}.bin"
INDEX_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits in 16 bits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def _encoded(documents: Iterable[str], tokenizer: Any, eos: int, batch_size: int) -> Iterator[np.ndarray]:
    """Token ids of each document (no special tokens) followed by `eos`, tokenized in batches."""
    docs = iter(documents)
    while batch := list(itertools.islice(docs, batch_size)):
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            yield np.asarray([*ids, eos], dtype=np.int64)


class _ShardSink:
    """Accumulates tokens into fixed-size shards written under temporary names."""

    def __init__(self, out_dir: Path, dtype: np.dtype, shard_tokens: int):
        self.out_dir, self.dtype, self.shard_tokens = out_dir, dtype, shard_tokens
        self.buffer = np.empty(shard_tokens, dtype=dtype)
        self.fill = self.docs = 0
        self.shards: list[dict] = []
        self.temps: list[Path] = []

    def add(self, ids: np.ndarray, ends_document: bool) -> None:
        pos = 0
        while pos < len(ids):
            take = min(len(ids) - pos, self.shard_tokens - self.fill)
            self.buffer[self.fill : self.fill + take] = ids[pos : pos + take]
            self.fill += take
            pos += take
            if self.fill == self.shard_tokens and pos < len(ids):
                self.flush()
        self.docs += ends_document
        if self.fill == self.shard_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.fill:
            return
        name = SHARD_PATTERN.format(len(self.shards))
        tmp = self.out_dir / f".{name}.tmp"
        self.temps.append(tmp)
        self.buffer[: self.fill].tofile(tmp)
        self.shards.append({"file": name, "tokens": int(self.fill), "docs": int(self.docs)})
        self.fill = self.docs = 0

    def commit(self) -> None:
        """Rename the temporary shards into place and remove shard files of an earlier, longer run."""
        keep = {s["file"] for s in self.shards}
        for tmp, shard in zip(self.temps, self.shards):
            os.replace(tmp, self.out_dir / shard["file"])
        self.temps = []
        for stale in self.out_dir.glob("shard_*.bin"):
            if stale.name not in keep:
                stale.unlink()

    def discard(self) -> None:
        for tmp in self.temps:
            tmp.unlink(missing_ok=True)


def write_shards(
    documents: Iterable[str],
    tokenizer: Any,
    out_dir: str | os.PathLike,
    max_tokens: int,
    shard_tokens: int,
    *,
    tokenizer_name: str,
    source: dict,
    read_report: ReadReport | None = None,
    batch_size: int = 64,
) -> dict:
    """Tokenize `documents` (no special tokens, EOS appended to each) into shards of `shard_tokens` tokens
    until `max_tokens` (the last document may be cut); write index.json; return the index.

    `read_report` is the report the document source fills as it is read (skipped bad rows); it is recorded
    in the index once the documents are consumed."""
    if max_tokens < 1 or shard_tokens < 1:
        raise ValueError("max_tokens and shard_tokens must be positive")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(f"tokenizer {tokenizer_name!r} has no EOS token")
    vocab_size = len(tokenizer)
    dtype = token_dtype(vocab_size)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sink = _ShardSink(out_dir, dtype, shard_tokens)
    total = docs = 0
    truncated = False
    progress = tqdm(total=max_tokens, unit="tok", unit_scale=True, mininterval=10, desc="tokenizing")
    try:
        for ids in _encoded(documents, tokenizer, eos, batch_size):
            if ids.max() > np.iinfo(dtype).max:
                raise ValueError(f"token id {int(ids.max())} does not fit {dtype.name} (vocab_size {vocab_size})")
            truncated = len(ids) > max_tokens - total
            ids = ids[: max_tokens - total]
            sink.add(ids.astype(dtype), ends_document=not truncated)
            total += len(ids)
            docs += not truncated
            progress.update(len(ids))
            if total == max_tokens:
                break
        sink.flush()
        if total == 0:
            raise ValueError("no tokens: the document source is empty")
        sink.commit()
    finally:
        progress.close()
        sink.discard()
    index = {
        "version": INDEX_VERSION,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "eos_id": int(eos),
        "tokenizer": tokenizer_name,
        "source": source,
        "max_tokens": max_tokens,
        "shard_tokens": shard_tokens,
        "shards": sink.shards,
        "total_tokens": total,
        "total_docs": docs,
        "last_doc_truncated": truncated,
        "skipped_rows": read_report.skipped if read_report else 0,
        "read_report": read_report.as_dict() if read_report else None,
    }
    atomic_write_json(out_dir / INDEX_NAME, index)
    log.info("wrote %d tokens (%d documents) in %d shards to %s", total, docs, len(sink.shards), out_dir)
    return index


class TokenShards:
    """Read-only view of a shard directory: one contiguous token stream over memory-mapped shards."""

    def __init__(self, index_path: str | os.PathLike):
        self.index_path = Path(index_path)
        self.index = json.loads(self.index_path.read_text(encoding="utf-8"))
        self.dtype = np.dtype(self.index["dtype"])
        self.eos_id: int = self.index["eos_id"]
        self.vocab_size: int = self.index["vocab_size"]
        self.shards = []
        for shard in self.index["shards"]:
            path = self.index_path.parent / shard["file"]
            data = np.memmap(path, dtype=self.dtype, mode="r")
            if len(data) != shard["tokens"]:
                raise ValueError(f"{path}: {len(data)} tokens, index.json says {shard['tokens']}")
            self.shards.append(data)
        self.offsets = np.cumsum([0] + [len(s) for s in self.shards])
        if self.offsets[-1] != self.index["total_tokens"]:
            raise ValueError(
                f"{self.index_path}: shards hold {self.offsets[-1]} tokens, total_tokens says "
                f"{self.index['total_tokens']}"
            )

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def total_tokens(self) -> int:
        return len(self)

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens [start, start + length) of the stream as int64, across shard boundaries."""
        if start < 0 or length < 0 or start + length > len(self):
            raise IndexError(f"range [{start}, {start + length}) outside 0..{len(self)}")
        out = np.empty(length, dtype=np.int64)
        pos = 0
        shard = int(np.searchsorted(self.offsets, start, side="right")) - 1
        while pos < length:
            lo = start + pos - int(self.offsets[shard])
            take = min(length - pos, len(self.shards[shard]) - lo)
            out[pos : pos + take] = self.shards[shard][lo : lo + take]
            pos += take
            shard += 1
        return out

    def sample(self, n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
        """`n` random contiguous windows of `seq_len` tokens, shape (n, seq_len), int64; starts are uniform
        over the whole stream and drawn from `rng` (e.g. `np.random.default_rng(seed)`)."""
        if seq_len > len(self):
            raise ValueError(f"seq_len {seq_len} exceeds the {len(self)} tokens of {self.index_path}")
        starts = rng.integers(0, len(self) - seq_len + 1, size=n)
        return np.stack([self.read(int(s), seq_len) for s in starts]) if n else np.empty((0, seq_len), np.int64)
