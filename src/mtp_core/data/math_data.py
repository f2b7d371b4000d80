"""Prepare a math dataset: train / validation / test JSONL and the split report.

Two kinds share one path: `synthetic_math` (generated, see `synthetic.py`) and `metamathqa` (MetaMathQA +
GSM8K test, see `metamathqa.py`). Both go through the same seed-grouped split (`split.py`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..io import ReadReport, atomic_write_json, atomic_write_jsonl
from .metamathqa import load_gsm8k_test, load_metamathqa
from .split import split_by_group, split_report
from .synthetic import Difficulty, generate_test, generate_train

log = logging.getLogger(__name__)
SPLITS = ("train", "validation", "test")


class ContaminationError(ValueError):
    """Generated test questions that are also train/validation questions."""


def build_math(spec: dict, seed: int, on_bad_row: str = "error") -> tuple[dict[str, list[dict]], dict]:
    """Rows of every split and the split report of a `synthetic_math` or `metamathqa` dataset spec."""
    kind = spec["kind"]
    reads: dict[str, dict] = {}
    if kind == "synthetic_math":
        level = Difficulty.from_dict(spec.get("difficulty"))
        examples = generate_train(spec["n_seed_problems"], spec.get("augmentations", {}), seed, level)
        rows, taken = [ex.row for ex in examples], {ex.problem.key for ex in examples}
        test = [ex.row for ex in generate_test(spec["n_test_problems"], seed, exclude=taken, difficulty=level)]
    elif kind == "metamathqa":
        train_read, test_read = ReadReport(spec["path"]), ReadReport(spec["test"]["path"])
        rows = list(load_metamathqa(spec["path"], on_bad_row, train_read))
        t = spec["test"]
        test = list(load_gsm8k_test(t["path"], t.get("name"), t.get("split", "test"), on_bad_row, test_read))
        reads = {"train": train_read.as_dict(), "test": test_read.as_dict()}
    else:
        raise ValueError(f"dataset kind {kind!r} is not a math dataset (synthetic_math or metamathqa)")
    train, validation = split_by_group(rows, spec["validation_fraction"], spec["split_seed"])
    skipped = sum(r["skipped"] for r in reads.values())
    report = {
        "kind": kind,
        "seed": seed,
        "validation_fraction": spec["validation_fraction"],
        "split_seed": spec["split_seed"],
        **split_report(train, validation, test, skipped_rows=skipped),
        "reads": reads,
    }
    overlap = report["test_questions_in_train_or_validation"]
    if overlap and kind == "synthetic_math":
        raise ContaminationError(f"{overlap} generated test questions are train/validation questions")
    if overlap:
        log.warning("%d test questions are also MetaMathQA questions", overlap)
    return {"train": train, "validation": validation, "test": test}, report


def prepare_math(spec: dict, out_dir: str | os.PathLike, seed: int, on_bad_row: str = "error") -> dict:
    """Write `{train,validation,test}.jsonl` and `split_report.json` (last) under `out_dir`; returns the report."""
    splits, report = build_math(spec, seed, on_bad_row)
    out_dir = Path(out_dir)
    for name in SPLITS:
        atomic_write_jsonl(out_dir / f"{name}.jsonl", splits[name])
    atomic_write_json(out_dir / "split_report.json", report)
    for name in SPLITS:
        log.info("%s: %d rows", name, len(splits[name]))
    if report["skipped_rows"]:
        log.warning("skipped %d bad rows (see split_report.json)", report["skipped_rows"])
    return report
