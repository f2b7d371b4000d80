"""Seed-grouped split and the synthetic math dataset written by `prepare_math`."""

from __future__ import annotations

import json

import pytest

from mtp_core.data import build_math, prepare_math, split_by_group, split_report
from mtp_core.data.split import SplitError, validation_group_count
from mtp_core.io import read_jsonl
from tests.conftest import REPO

SPEC = {
    "kind": "synthetic_math",
    "n_seed_problems": 40,
    "n_test_problems": 12,
    "augmentations": {"answer_augmentation": 1, "rephrasing": 1, "self_verification": 1, "fobar": 1},
    "validation_fraction": 0.1,
    "split_seed": 0,
}


def grouped_rows(n_groups: int, sizes=(1, 2, 3, 5)) -> list[dict]:
    return [
        {"query": f"q{g}-{i}", "type": f"T{i % 2}", "original_question": f"seed {g}"}
        for g in range(n_groups)
        for i in range(sizes[g % len(sizes)])
    ]


def test_no_group_crosses_and_fraction_is_close():
    rows = grouped_rows(200)
    train, val = split_by_group(rows, 0.2, split_seed=1)
    assert len(train) + len(val) == len(rows)
    train_g = {r["original_question"] for r in train}
    val_g = {r["original_question"] for r in val}
    assert not train_g & val_g
    assert len(val_g) == 40  # 0.2 of 200 groups
    # every row of a group stays with its group
    for g in val_g:
        assert sum(r["original_question"] == g for r in rows) == sum(r["original_question"] == g for r in val)


def test_split_is_deterministic_and_independent_of_row_order():
    rows = grouped_rows(50)
    a = split_by_group(rows, 0.1, split_seed=3)
    assert a == split_by_group(rows, 0.1, split_seed=3)
    val_groups = lambda split: {r["original_question"] for r in split[1]}  # noqa: E731
    assert val_groups(split_by_group(list(reversed(rows)), 0.1, split_seed=3)) == val_groups(a)
    assert val_groups(split_by_group(rows, 0.1, split_seed=4)) != val_groups(a)


@pytest.mark.parametrize(
    "n, fraction, expected", [(0, 0.5, 0), (1, 0.5, 0), (2, 0.01, 1), (10, 0.99, 9), (40, 0.05, 2)]
)
def test_validation_group_count(n, fraction, expected):
    assert validation_group_count(n, fraction) == expected


def test_report_counts_and_crossing_check():
    rows = grouped_rows(20)
    train, val = split_by_group(rows, 0.25, split_seed=0)
    test = [{"query": "seed 0", "type": "T"}, {"query": "new", "type": "T"}]
    rep = split_report(train, val, test, skipped_rows=3)
    assert rep["groups_crossing"] == 0 and rep["skipped_rows"] == 3
    assert rep["splits"]["train"]["rows"] == len(train)
    assert rep["splits"]["validation"]["groups"] == 5
    assert sum(rep["splits"]["train"]["types"].values()) == len(train)
    assert rep["splits"]["test"] == {"rows": 2, "types": {"T": 2}}
    assert rep["test_questions_in_train_or_validation"] == 1
    with pytest.raises(SplitError, match="1 groups"):
        split_report(train, val + [train[0]])
    with pytest.raises(ValueError):
        split_by_group(rows, 1.0, 0)


def test_prepare_math_synthetic_writes_splits_and_report(tmp_path):
    report = prepare_math(SPEC, tmp_path, seed=0)
    rows = {s: list(read_jsonl(tmp_path / f"{s}.jsonl")) for s in ("train", "validation", "test")}
    assert json.loads((tmp_path / "split_report.json").read_text()) == report
    assert report["groups_crossing"] == 0
    assert report["test_questions_in_train_or_validation"] == 0
    assert report["splits"]["train"]["groups"] + report["splits"]["validation"]["groups"] == 40
    assert report["splits"]["validation"]["groups"] == 4
    assert len(rows["train"]) + len(rows["validation"]) == 40 * 5
    assert report["splits"]["train"]["types"] == {
        t: 36 for t in ("SYN_AnsAug", "SYN_FOBAR", "SYN_Rephrased", "SYN_SV", "SYN_Seed")
    }
    assert len(rows["test"]) == 12 and all(r["answer"].isdigit() for r in rows["test"])
    seeds = {r["original_question"] for s in ("train", "validation") for r in rows[s]}
    assert not seeds & {r["query"] for r in rows["test"]}
    assert not list(tmp_path.glob(".*.tmp"))
    # deterministic
    assert build_math(SPEC, seed=0)[0]["validation"] == rows["validation"]


def test_prepare_math_script(tmp_path, monkeypatch):
    """The workflow script writes the four outputs into the report's directory."""
    import runpy
    import sys
    from types import SimpleNamespace

    monkeypatch.setattr(sys, "stderr", sys.stderr)  # the script redirects it to the log file
    out = tmp_path / "data" / "math"
    smk = SimpleNamespace(
        log=[str(tmp_path / "log.txt")],
        output=SimpleNamespace(report=str(out / "split_report.json")),
        params=SimpleNamespace(spec=SPEC, seed=0, on_bad_row="error"),
    )
    script = REPO / "workflow" / "scripts" / "prepare_math.py"
    runpy.run_path(str(script), init_globals={"snakemake": smk}, run_name="__main__")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["split_report.json", "test.jsonl", "train.jsonl", "validation.jsonl"]


@pytest.mark.parametrize("config", ["config.yaml", "config/tiny.yaml"])
def test_no_test_problem_is_a_training_problem_in_other_words(config):
    """The embedded and tiny math datasets as the pipeline builds them: no test question is a train or validation
    query word for word (a rephrasing included), nor the same problem under another name or wording: the same
    numbers in the question and the same answer as a seed's, answer augmentation's or rephrasing's."""
    import re

    from mtp_core.validation import load_config

    cfg = load_config(REPO / config)
    splits, report = build_math(cfg["datasets"]["math"], cfg["seed"])
    seen = [r for s in ("train", "validation") for r in splits[s]]

    def problem(query: str, answer: str) -> tuple:
        return tuple(sorted(re.findall(r"\d+", query))), answer

    worded = {r["type"] for r in seen} - {"SYN_SV", "SYN_FOBAR"}  # these ask for a quantity, not the answer
    known = {problem(r["query"], r["response"].rsplit("The answer is: ", 1)[1]) for r in seen if r["type"] in worded}
    queries = {r["query"] for r in seen}
    assert report["test_questions_in_train_or_validation"] == 0
    assert not [r["query"] for r in splits["test"] if r["query"] in queries]
    assert not [r["query"] for r in splits["test"] if problem(r["query"], r["answer"]) in known]
