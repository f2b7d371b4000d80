"""Prompt sets: row format, determinism, conversation filters, Spec-Bench-style categories, user JSONL files,
bad rows. The packaged ShareGPT file is parsed once for the module."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from mtp_core.data import build_prompt_set, prepare_math, prepare_prompt_set, read_sharegpt
from mtp_core.data.prompts import (
    CODE_INSTRUCTION,
    MAX_PROMPT_CHARS,
    conversation_prompts,
    first_human_turns,
    jsonl_prompts,
    math_prompts,
    select,
)
from mtp_core.data.sharegpt import conversation_text
from mtp_core.data.specbench import CATEGORIES, classify, specbench_prompts
from mtp_core.io import BadRowError, ReadReport, read_jsonl
from tests.conftest import REPO

ROW_KEYS = {"id", "category", "prompt", "turns", "source"}


def check_rows(rows):
    """The row format; math prompts (and only they, among the built-in sources) carry `answer`."""
    for r in rows:
        assert set(r) == ROW_KEYS | ({"answer"} if r["category"] == "math_reasoning" else set()), r
        assert isinstance(r["id"], str) and r["id"]
        assert isinstance(r["turns"], list) and r["turns"] and r["prompt"] == r["turns"][0]
        assert all(isinstance(t, str) and t.strip() for t in r["turns"])
    assert len({r["id"] for r in rows}) == len(rows)


def conv(id_, *turns):
    return {"id": id_, "conversations": [{"from": f, "value": v} for f, v in turns]}


@pytest.fixture(scope="module")
def sharegpt():
    return read_sharegpt()


@pytest.fixture(scope="module")
def math_test(tmp_path_factory):
    d = tmp_path_factory.mktemp("math")
    prepare_math(
        {
            "kind": "synthetic_math",
            "n_seed_problems": 20,
            "n_test_problems": 10,
            "augmentations": {},
            "validation_fraction": 0.1,
            "split_seed": 0,
        },
        d,
        seed=0,
    )
    return d / "test.jsonl"


def test_first_human_turn_filters_are_counted():
    items = [
        conv("a", ("human", "  Hello there  "), ("gpt", "hi")),
        conv("b"),
        conv("c", ("gpt", "I start"), ("human", "x")),
        conv("d", ("human", "   ")),
        conv("e", ("human", "x" * (MAX_PROMPT_CHARS + 1))),
        conv("f", ("human", "你好，请帮我写一首诗")),
        conv("g", ("user", "Hello there")),
        conv("h", ("user", "What is 2 + 2?")),
    ]
    filters = Counter()
    assert first_human_turns(items, filters) == [("a", "Hello there"), ("h", "What is 2 + 2?")]
    assert filters == {
        "empty_conversation": 1,
        "not_human_first": 1,
        "empty_first_turn": 1,
        "too_long": 1,
        "mostly_non_ascii": 1,
        "duplicate": 1,
    }
    rows = conversation_prompts(items, Counter())
    check_rows(rows)
    assert rows[0] == {
        "id": "a",
        "category": "conversation",
        "prompt": "Hello there",
        "turns": ["Hello there"],
        "source": "sharegpt",
    }


@pytest.mark.parametrize(
    "text, category",
    [
        ("Translate this paragraph into French: good morning", "translation"),
        ("Please summarize the following article for me", "summarization"),
        ("I want you to act as a travel guide in Rome", "roleplay"),
        ("Write a short poem about the sea", "writing"),
        ("Here is a riddle: what has keys but no locks", "reasoning"),
        ("What is the capital of Australia?", "qa"),
        ("def f(x):\n    return x", "code_like"),
        ("Fix this: int main() {", "code_like"),
        ("Tell me more.", "unclassified"),
        ("What is this? And also that?", "unclassified"),  # more than one question is not a single qa question
    ],
)
def test_classification_rules(text, category):
    assert classify(text) == category


def test_select_is_a_seeded_ordered_sample():
    rows = [{"id": str(i)} for i in range(100)]
    a = select(rows, 10, "s")
    assert a == select(rows, 10, "s") != select(rows, 10, "t")
    assert [int(r["id"]) for r in a] == sorted(int(r["id"]) for r in a)
    assert select(rows, None, "s") == rows == select(rows, 1000, "s")


def test_specbench_reports_empty_categories(caplog):
    items = [conv(str(i), ("human", f"Write a story about dragon number {i}")) for i in range(5)]
    coding = [{"id": "HumanEval/0", "category": "coding", "prompt": "p", "turns": ["p"], "source": "humaneval"}]
    math = math_prompts([{"query": "1 + 1?", "answer": "2"}], "math/test")
    rows, report = specbench_prompts(items, coding, math, n=2, seed=0)
    check_rows(rows)
    assert report["categories"] == {c: {"writing": 2, "coding": 1, "math_reasoning": 1}.get(c, 0) for c in CATEGORIES}
    assert set(report["empty_categories"]) == {"translation", "summarization", "roleplay", "reasoning", "qa"}
    assert "no prompts for category 'qa'" in caplog.text
    assert [r["category"] for r in rows] == ["writing", "writing", "coding", "math_reasoning"]


def test_jsonl_normalisation(tmp_path):
    path = tmp_path / "question.jsonl"
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]},
        {"id": "x", "prompt": "Say hi", "answer": 3},
        {"question": "What is 2 + 2?"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = jsonl_prompts(path, "error", ReadReport(str(path)))
    assert out[0] == {
        "id": "81",
        "category": "writing",
        "prompt": "Compose a blog post.",
        "turns": ["Compose a blog post.", "Rewrite it."],
        "source": "question.jsonl",
    }
    assert out[1] == {
        "id": "x",
        "category": "uncategorised",
        "prompt": "Say hi",
        "turns": ["Say hi"],
        "source": "question.jsonl",
        "answer": "3",
    }
    assert out[2]["id"] == "question-3" and out[2]["prompt"] == "What is 2 + 2?"


@pytest.mark.parametrize(
    "bad, reason",
    [
        ({"id": 1, "turns": []}, "field 'turns' must be a non-empty list"),
        ({"id": 1, "turns": ["ok", ""]}, "turn 1 of field 'turns'"),
        ({"id": 1, "text": "no prompt field"}, "needs one of the fields"),
        ({"id": 1, "prompt": ""}, "field 'prompt' is empty"),
        ({"id": 1, "prompt": "p", "category": 5}, "field 'category'"),
        ({"id": [1], "prompt": "p"}, "'question_id' / 'id'"),
    ],
)
def test_jsonl_bad_rows(tmp_path, bad, reason):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": 0, "prompt": "fine"}) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    spec = {"source": "jsonl", "path": str(path), "n": None}
    with pytest.raises(BadRowError, match=reason) as info:
        build_prompt_set("user", spec, seed=0)
    assert info.value.row == 2 and info.value.path == str(path)
    rows, report = build_prompt_set("user", spec, seed=0, on_bad_row="skip")
    assert len(rows) == 1 and report["skipped_rows"] == 1


def test_jsonl_duplicate_ids(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="duplicate prompt ids"):
        jsonl_prompts(path, "error", ReadReport(str(path)))


def test_math_prompt_set(tmp_path, math_test):
    test_rows = list(read_jsonl(math_test))
    report = prepare_prompt_set(
        "math",
        {"source": "math", "dataset": "math", "n": 4},
        tmp_path / "m.jsonl",
        tmp_path / "m.report.json",
        seed=0,
        math_test=math_test,
    )
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    check_rows(rows)
    assert len(rows) == 4 and report["rows"] == 4 and report["categories"] == {"math_reasoning": 4}
    by_query = {r["query"]: r["answer"] for r in test_rows}
    assert all(by_query[r["prompt"]] == r["answer"] and r["source"] == "math/test" for r in rows)
    assert json.loads((tmp_path / "m.report.json").read_text()) == report
    spec = {"source": "math", "dataset": "math", "n": None}
    all_rows, _ = build_prompt_set("math", spec, seed=0, math_test=math_test)
    assert len(all_rows) == len(test_rows)


def test_humaneval_prompt_set():
    rows, report = build_prompt_set("code", {"source": "humaneval", "n": 5}, seed=0)
    check_rows(rows)
    assert len(rows) == 5 and report["reads"]["humaneval"]["rows_read"] == 164
    assert all(r["id"].startswith("HumanEval/") and r["category"] == "coding" for r in rows)
    assert all(r["prompt"].startswith(CODE_INSTRUCTION + "\n\n```python\n") and "def " in r["prompt"] for r in rows)
    assert rows == build_prompt_set("code", {"source": "humaneval", "n": 5}, seed=0)[0]
    assert rows != build_prompt_set("code", {"source": "humaneval", "n": 5}, seed=1)[0]


def test_packaged_sharegpt(sharegpt):
    assert len(sharegpt) > 10_000  # the packaged file is cut off; its complete items are kept
    assert all(isinstance(i["id"], str) for i in sharegpt[:100])
    assert conversation_text(conv("a", ("human", " Hi "), ("gpt", ""), ("gpt", "Hello"))) == "Hi\n\nHello"
    filters = Counter()
    rows = conversation_prompts(sharegpt, filters)
    check_rows(rows)
    assert all(len(r["prompt"]) <= MAX_PROMPT_CHARS for r in rows)
    assert filters["not_human_first"] > 0 and filters["too_long"] > 0 and filters["empty_conversation"] > 0


def test_specbench_from_packaged_sources(sharegpt, math_test, monkeypatch):
    """Every category from its source; the math prompts are test-split problems of the named dataset, with their
    answers (its train and validation problems are none of them: `build_math`), and the split file is required."""
    from mtp_core.data import prompt_sets

    monkeypatch.setattr(prompt_sets, "read_sharegpt", lambda *a, **k: sharegpt)  # parsed once per module
    spec = {"source": "specbench", "dataset": "math", "n": 3}
    rows, report = build_prompt_set("specbench", spec, seed=0, math_test=math_test)
    check_rows(rows)
    assert report["categories"] == {c: 3 for c in CATEGORIES} and not report["empty_categories"]
    assert [r["category"] for r in rows] == [c for c in CATEGORIES for _ in range(3)]
    assert all(classify(r["prompt"]) == r["category"] for r in rows if r["source"] == "sharegpt")
    test = {r["query"]: r["answer"] for r in read_jsonl(math_test)}
    math = [r for r in rows if r["category"] == "math_reasoning"]
    assert all(r["source"] == "math/test" and test[r["prompt"]] == r["answer"] for r in math), math
    assert report["candidates"]["math_reasoning"] == len(test) and report["reads"]["math_test"]["rows_read"] == len(
        test
    )
    assert rows == build_prompt_set("specbench", spec, seed=0, math_test=math_test)[0]
    with pytest.raises(ValueError, match="source specbench needs the test split file"):
        build_prompt_set("specbench", spec, seed=0)
    conv_rows, conv_report = build_prompt_set("conversation", {"source": "sharegpt", "n": 6}, seed=0)
    assert len(conv_rows) == 6 and conv_report["candidates"] > 1000 and sum(conv_report["filters"].values()) > 0


def test_sharegpt_bad_items(tmp_path):
    path = tmp_path / "sg.json"
    items = [
        conv("a", ("human", "hi")),
        {"id": "b", "conversations": "oops"},
        {"id": "c", "conversations": [{"from": "human", "value": None}]},
        {"conversations": []},
    ]
    path.write_text(json.dumps(items), encoding="utf-8")
    with pytest.raises(BadRowError, match="row 2: field 'conversations' must be a list"):
        read_sharegpt(path)
    report = ReadReport(str(path))
    assert [i["id"] for i in read_sharegpt(path, "skip", report)] == ["a"] and report.skipped == 3
    assert "row 3: turn 0: field 'value' must be a string" in report.examples[1]


def test_prepare_prompts_script(tmp_path, math_test, monkeypatch):
    """The workflow script: named input `math_test` for source math, outputs prompts + report."""
    import runpy
    import sys
    from types import SimpleNamespace

    monkeypatch.setattr(sys, "stderr", sys.stderr)  # the script redirects it to the log file
    smk = SimpleNamespace(
        log=[str(tmp_path / "log.txt")],
        input=SimpleNamespace(math_test=str(math_test)),
        output=SimpleNamespace(prompts=str(tmp_path / "math.jsonl"), report=str(tmp_path / "math.report.json")),
        params=SimpleNamespace(
            name="math", spec={"source": "math", "dataset": "math", "n": 2}, seed=0, on_bad_row="error"
        ),
    )
    script = REPO / "workflow" / "scripts" / "prepare_prompts.py"
    runpy.run_path(str(script), init_globals={"snakemake": smk}, run_name="__main__")
    assert len(list(read_jsonl(tmp_path / "math.jsonl"))) == 2
    assert json.loads((tmp_path / "math.report.json").read_text())["rows"] == 2
