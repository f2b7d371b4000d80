"""Paper 2 test helpers: result files written by hand (acceptance counters per prompt, references, validation
metrics, speed rows) and the report parameters that name them, so that every table and figure can be checked
against numbers computed by hand. Nothing here calls the code under test."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path, obj: dict, samples: list[dict] | None = None) -> str:
    """`path` and, with `samples`, `<path without .json>.samples.jsonl` (the pipeline's result layout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    if samples is not None:
        lines = "".join(json.dumps(s) + "\n" for s in samples)
        path.with_name(path.name[: -len(".json")] + ".samples.jsonl").write_text(lines)
    return str(path)


def counters(a: list[int], c_cmp: list[int], c_step: int) -> dict:
    """One prompt's counters as an acceptance result's samples hold them."""
    return {"A": a, "C_cmp": c_cmp, "C_step": c_step}


def fake_run(root: Path, run: str, title: str, heads: int, per_set: dict, **extra) -> dict:
    """The report's view of one run (`P2Plan.run_files`): acceptance files written from `per_set`
    ({set: {depth: [counters per prompt]}}), plus `extra` keys."""
    acc = {
        ps: {
            str(d): write_json(root / run / ps / f"h{d}.json", {}, [{"id": f"p{i}", **c} for i, c in enumerate(cs)])
            for d, cs in by_depth.items()
        }
        for ps, by_depth in per_set.items()
    }
    return {"title": title, "heads": heads, "acceptance": acc, "replicates": [], **extra}
