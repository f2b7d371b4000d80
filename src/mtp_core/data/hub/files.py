"""Stand-ins for files the paper config downloads by URL: Spec-Bench's `question.jsonl`, written in its format
(`question_id`, `category`, `turns`) from the packaged Spec-Bench-style prompt set (`data.specbench`)."""

from __future__ import annotations

import os
from pathlib import Path

from ...io import atomic_write_jsonl
from ..prompt_sets import build_prompt_set

KINDS = ("spec_bench_questions",)


def write_file_standin(spec: dict, out_path: str | os.PathLike, seed: int = 0) -> Path:
    """`spec`: `kind` (spec_bench_questions) and `rows` (prompts per category)."""
    if spec["kind"] not in KINDS:
        raise ValueError(f"hub_mirror: file kind {spec['kind']!r} is not one of {', '.join(KINDS)}")
    rows, _ = build_prompt_set("specbench", {"source": "specbench", "n": int(spec["rows"])}, seed=seed)
    atomic_write_jsonl(
        out_path,
        ({"question_id": i, "category": r["category"], "turns": r["turns"]} for i, r in enumerate(rows, start=1)),
    )
    return Path(out_path)
