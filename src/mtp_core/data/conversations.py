"""Paper 1's conversation training data: ShareGPT-format conversations -> (query, response) rows.

Paper 1's Magpie ablation (App. A.1, Table 3) trains on Magpie-Pro-300K and Magpie-Reasoning-150K, which are
ShareGPT-format (`conversations: [{"from": "human"|"gpt", "value"}]`); the official code renders them with the
chat template (`convo_from_human_from_gpt`). A dataset of kind `sharegpt` with `path` (hub ids or local
.json/.jsonl files, one or a list) reads them; without `path` the packaged ShareGPT file stands in (tiny and
embedded scales, offline). Each conversation gives one row: its first human turn as `query` and the assistant
turn that answers it as `response` (the P1 batch builder reads one example per row from its start and
truncates it to the training window, so later turns would never be seen anyway).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from ..io import ReadReport
from .records import read_records
from .sharegpt import check_turns, read_sharegpt

log = logging.getLogger(__name__)
USER_ROLES = ("human", "user")
ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "bing", "bard")


def read_conversations(spec: dict, on_bad_row: str = "error", report: ReadReport | None = None) -> Iterator[dict]:
    """Conversations of a `sharegpt` dataset spec: `path` (str or list; absent: the packaged file), `split`."""
    path = spec.get("path")
    if path is None:
        yield from read_sharegpt(None, on_bad_row, report)
        return
    for p in [path] if isinstance(path, str) else list(path):
        yield from read_records(p, check_turns, on_bad_row, report, split=spec.get("split", "train"))


def first_turn_rows(items: Iterable[dict], max_rows: int | None = None) -> tuple[list[dict], dict[str, int]]:
    """(rows, counts): one {query, response} row per conversation whose first human turn is followed by a
    non-empty assistant turn; `counts` says how many conversations were used and why others were not."""
    rows: list[dict] = []
    counts = {"conversations": 0, "used": 0, "no_user_turn": 0, "no_answer": 0}
    for item in items:
        if max_rows is not None and len(rows) >= max_rows:
            break
        counts["conversations"] += 1
        turns = item["conversations"]
        first = next((i for i, t in enumerate(turns) if t["from"].lower() in USER_ROLES and t["value"].strip()), None)
        if first is None:
            counts["no_user_turn"] += 1
            continue
        nxt = turns[first + 1] if first + 1 < len(turns) else None
        if nxt is None or nxt["from"].lower() not in ASSISTANT_ROLES or not nxt["value"].strip():
            counts["no_answer"] += 1
            continue
        rows.append({"query": turns[first]["value"].strip(), "response": nxt["value"].strip()})
        counts["used"] += 1
    log.info("conversation rows: %s", counts)
    return rows, counts
