"""MetaMathQA / GSM8K loaders on local files (the hub is unreachable here), bad rows, and record readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtp_core.data import build_math, gsm8k_answer, load_gsm8k_test, load_metamathqa, prepare_math
from mtp_core.data.records import DatasetLoadError, iter_json_array, read_records
from mtp_core.io import BadRowError, ReadReport, read_jsonl
from tests.conftest import REPO

GSM8K = REPO.parent / "shared" / "data" / "gsm8k"
needs_gsm8k = pytest.mark.skipif(
    not (GSM8K / "test.jsonl").exists(), reason=f"GSM8K files not found at {GSM8K} (shared data is optional)"
)


def mm_row(i: int, seed: int | None = None, type_: str = "GSM_AnsAug") -> dict:
    q = f"Seed question {i if seed is None else seed}?"
    return {
        "query": q if type_ == "GSM_AnsAug" else f"Rephrased {i}",
        "response": f"Step.\nThe answer is: {i}",
        "type": type_,
        "original_question": q,
    }


def good_rows(n_seeds: int = 10) -> list[dict]:
    types = ("GSM_AnsAug", "GSM_Rephrased")
    return [mm_row(10 * s + k, seed=s, type_=t) for s in range(n_seeds) for k, t in enumerate(types)]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


BAD_ROWS = [
    ({"query": "q", "response": "r", "type": "t"}, "missing field 'original_question'"),
    ({"query": "", "response": "r", "type": "t", "original_question": "o"}, "field 'query' is empty"),
    ({"query": "q", "response": 7, "type": "t", "original_question": "o"}, "field 'response' must be a string"),
    ("{not json", "undecodable line"),
    ([1, 2], "expected a JSON object"),
]


@pytest.mark.parametrize("bad, reason", BAD_ROWS)
def test_metamathqa_jsonl_bad_row_names_file_and_row(tmp_path, bad, reason):
    path = write_jsonl(tmp_path / "mm.jsonl", [*good_rows(1), bad, *good_rows(1)])
    with pytest.raises(BadRowError, match=reason) as info:
        list(load_metamathqa(str(path)))
    assert info.value.path == str(path) and info.value.row == 3
    assert f"{path}: row 3:" in str(info.value)


def test_metamathqa_skip_mode_counts(tmp_path):
    path = write_jsonl(tmp_path / "mm.jsonl", [*good_rows(2), *(b for b, _ in BAD_ROWS), "", *good_rows(1)])
    report = ReadReport(str(path))
    rows = list(load_metamathqa(str(path), on_bad_row="skip", report=report))
    assert len(rows) == 6 and report.skipped == len(BAD_ROWS) and report.rows_read == 6
    assert all(set(r) == {"query", "response", "type", "original_question"} for r in rows)
    assert len(report.examples) == len(BAD_ROWS) and "row 5" in report.examples[0]


def test_metamathqa_json_array_and_extra_fields(tmp_path):
    rows = [dict(r, extra=1) for r in good_rows(3)]
    path = tmp_path / "mm.json"
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    assert list(load_metamathqa(str(path))) == [
        {k: r[k] for k in ("query", "response", "type", "original_question")} for r in rows
    ]
    path.write_text(json.dumps([*rows[:2], {"query": "q"}, rows[2]]), encoding="utf-8")
    with pytest.raises(BadRowError, match=r"row 3: missing field 'response'"):
        list(load_metamathqa(str(path)))
    report = ReadReport(str(path))
    assert len(list(load_metamathqa(str(path), "skip", report))) == 3 and report.skipped == 1


def test_json_array_reader_errors_and_truncation(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[{"a": 1}, {"a": 2}, {"a": ', encoding="utf-8")
    with pytest.raises(BadRowError, match="row 3: file is cut off"):
        list(iter_json_array(path))
    assert list(iter_json_array(path, allow_truncated=True)) == [{"a": 1}, {"a": 2}]
    path.write_text('[{"a": 1}, {"a": oops}, {"a": 3}]', encoding="utf-8")
    with pytest.raises(BadRowError, match="row 2: undecodable item"):
        list(iter_json_array(path))
    path.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(BadRowError, match="expected a JSON array"):
        list(iter_json_array(path))
    path.write_text("[]", encoding="utf-8")
    assert list(iter_json_array(path)) == []


def test_missing_local_file_and_unreachable_hub(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_records(str(tmp_path / "nope.jsonl")))
    with pytest.raises(DatasetLoadError, match="meta-math/MetaMathQA"):
        list(load_metamathqa("meta-math/MetaMathQA"))


def test_gsm8k_answer():
    assert gsm8k_answer("a\nb\n#### 1,234") == "1234"
    assert gsm8k_answer("#### -5 ") == "-5"
    with pytest.raises(ValueError, match="no '#### <number>' line"):
        gsm8k_answer("The answer is 5")
    with pytest.raises(ValueError, match="not a number"):
        gsm8k_answer("#### five")


def test_gsm8k_local_bad_rows(tmp_path):
    path = write_jsonl(
        tmp_path / "test.jsonl",
        [{"question": "Q1?", "answer": "x\n#### 3"}, {"question": "Q2?", "answer": "no marker"}],
    )
    with pytest.raises(BadRowError, match=r"row 2: field 'answer' has no"):
        list(load_gsm8k_test(str(path)))
    report = ReadReport(str(path))
    rows = list(load_gsm8k_test(str(path), on_bad_row="skip", report=report))
    assert rows == [
        {"query": "Q1?", "response": "x\n#### 3", "answer": "3", "type": "GSM8K", "original_question": "Q1?"}
    ]
    assert report.skipped == 1


def test_prepare_math_metamathqa_local_files_with_skips(tmp_path):
    train = write_jsonl(tmp_path / "mm.jsonl", [*good_rows(20), {"query": "q"}])
    test = write_jsonl(
        tmp_path / "gsm.jsonl",
        [{"question": "Seed question 0?", "answer": "#### 0"}, {"question": "New?", "answer": "#### 1,000"}, "{bad"],
    )
    spec = {
        "kind": "metamathqa",
        "path": str(train),
        "test": {"path": str(test), "name": None, "split": "test"},
        "validation_fraction": 0.2,
        "split_seed": 0,
    }
    with pytest.raises(BadRowError, match="mm.jsonl: row 41"):
        build_math(spec, seed=0)
    report = prepare_math(spec, tmp_path / "out", seed=0, on_bad_row="skip")
    assert report["skipped_rows"] == 2
    assert report["reads"]["train"]["skipped"] == 1 and report["reads"]["test"]["skipped"] == 1
    assert report["splits"]["validation"]["groups"] == 4 and report["groups_crossing"] == 0
    assert report["splits"]["train"]["types"] == {"GSM_AnsAug": 16, "GSM_Rephrased": 16}
    assert report["test_questions_in_train_or_validation"] == 1  # reported (a warning), not an error
    test_rows = list(read_jsonl(tmp_path / "out" / "test.jsonl"))
    assert [r["answer"] for r in test_rows] == ["0", "1000"]


@needs_gsm8k
def test_gsm8k_shared_test_file():
    rows = list(load_gsm8k_test(str(GSM8K / "test.jsonl")))
    assert len(rows) == 1319
    assert rows[0]["answer"] == "18" and rows[0]["query"].startswith("Janet")
    assert all(float(r["answer"]) == float(r["response"].rsplit("####", 1)[1].replace(",", "")) for r in rows)


@needs_gsm8k
def test_prepare_math_metamathqa_from_shared_gsm8k(tmp_path):
    """GSM8K train as a MetaMathQA-shaped file (each question one group), GSM8K test as the test split."""
    mm = tmp_path / "gsm8k_as_metamathqa.jsonl"
    write_jsonl(
        mm,
        [
            {"query": r["question"], "response": r["answer"], "type": "GSM_AnsAug", "original_question": r["question"]}
            for r in read_jsonl(GSM8K / "train.jsonl")
        ],
    )
    spec = {
        "kind": "metamathqa",
        "path": str(mm),
        "test": {"path": str(GSM8K / "test.jsonl")},
        "validation_fraction": 0.05,
        "split_seed": 0,
    }
    report = prepare_math(spec, tmp_path / "out", seed=0)
    splits = report["splits"]
    assert splits["train"]["rows"] + splits["validation"]["rows"] == 7473
    assert splits["validation"]["groups"] == round(0.05 * (splits["train"]["groups"] + splits["validation"]["groups"]))
    assert splits["test"]["rows"] == 1319 and report["groups_crossing"] == 0
