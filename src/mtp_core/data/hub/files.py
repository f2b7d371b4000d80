"""Stand-ins for files the paper config downloads by URL: Spec-Bench's `question.jsonl`, written in its format
(`question_id`, `category`, `turns`) from the packaged sources of the Spec-Bench-style prompt set (`data.specbench`),
its math category from the synthetic generator's test stream, unchecked against any training split: a stand-in
stands for the file's format, and no number of the rehearsal that reads it is reported."""

from __future__ import annotations

import os
from pathlib import Path

from ...io import ReadReport, atomic_write_jsonl
from ..prompts import humaneval_prompts, math_prompts
from ..sharegpt import read_sharegpt
from ..specbench import specbench_prompts
from ..synthetic import generate_test

KINDS = ("spec_bench_questions",)


def write_file_standin(spec: dict, out_path: str | os.PathLike, seed: int = 0) -> Path:
    """`spec`: `kind` (spec_bench_questions) and `rows` (prompts per category)."""
    if spec["kind"] not in KINDS:
        raise ValueError(f"hub_mirror: file kind {spec['kind']!r} is not one of {', '.join(KINDS)}")
    n = int(spec["rows"])
    coding = humaneval_prompts("error", ReadReport("human_eval"))
    math = math_prompts([ex.row for ex in generate_test(n, seed)], "synthetic_math/test")
    rows, _ = specbench_prompts(read_sharegpt(), coding, math, n, seed)
    atomic_write_jsonl(
        out_path,
        ({"question_id": i, "category": r["category"], "turns": r["turns"]} for i, r in enumerate(rows, start=1)),
    )
    return Path(out_path)
