"""The hub dataset stand-ins (`mtp_core.data.hub.datasets`): each folder has the hub repo's files, loads with
`datasets.load_dataset(folder, name=..., split=...)` offline exactly as its consumer asks, with the hub's columns;
our loaders read it; the rows are deterministic in the seed; and a wrong-format folder fails in the consumer with
an error that names the folder and the column, config or split. lm-eval's tasks on the stand-ins:
`test_hub_tasks.py`."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import datasets
import lm_eval.tasks
import pyarrow.parquet as pq
import pytest
import yaml

from mtp_core.data.conversations import first_turn_rows, read_conversations
from mtp_core.data.hub.datasets import DATASET_STANDINS, write_dataset_standin
from mtp_core.data.math_data import build_math
from mtp_core.data.metamathqa import load_gsm8k_test, load_metamathqa
from mtp_core.data.pretrain import fineweb_documents
from mtp_core.data.records import DatasetLoadError, local_cache_dir
from mtp_core.io import BadRowError, InputError, ReadReport
from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("datasets_cache_in_tmp")
ROWS = 4
STOCK = Path(lm_eval.tasks.__file__).parent
# the 27 subtasks of lm-eval's bbh_cot_fewshot group
BBH = [
    t.removeprefix("bbh_cot_fewshot_")
    for t in yaml.safe_load((STOCK / "bbh/cot_fewshot/_bbh_cot_fewshot.yaml").read_text())["task"]
]
MAGPIE = {"uuid", "instruction", "response", "conversations", "gen_input_configs", "task_category", "difficulty"}
# (hub id, config, split, streaming, columns that must be there): how each consumer asks (our config's datasets,
# lm-eval 0.4.13's YAMLs and our local task YAMLs)
ASKED = [
    ("meta-math/MetaMathQA", None, "train", False, {"query", "response", "type", "original_question"}),
    ("openai/gsm8k", "main", "test", False, {"question", "answer"}),
    ("openai/gsm8k", "main", "train", False, {"question", "answer"}),
    ("openai/gsm8k", "socratic", "test", False, {"question", "answer"}),
    ("HuggingFaceFW/fineweb-edu", "sample-350BT", "train", True, {"text", "id", "dump", "url", "file_path"}),
    ("HuggingFaceFW/fineweb-edu", "sample-350BT", "train", True, {"language", "language_score", "token_count"}),
    ("HuggingFaceFW/fineweb-edu", "sample-350BT", "train", True, {"score", "int_score"}),
    ("a-m-team/AM-Thinking-v1-Distilled", None, "train", False, {"system", "conversations"}),
    ("Magpie-Align/Magpie-Pro-300K-Filtered", None, "train", False, MAGPIE | {"model", "instruct_reward"}),
    ("Magpie-Align/Magpie-Reasoning-150K", None, "train", False, MAGPIE | {"gen_response_configs"}),
    ("math-ai/aime25", None, "test", False, {"problem", "answer"}),
    ("Idavidrein/gpqa", "gpqa_main", "train", False, {"Question", "Correct Answer", "Explanation"}),
    ("Idavidrein/gpqa", "gpqa_main", "train", False, {f"Incorrect Answer {i}" for i in (1, 2, 3)}),
    *(("SaylorTwift/bbh", task, "test", False, {"input", "target"}) for task in BBH),
    ("google/IFEval", None, "train", False, {"key", "prompt", "instruction_id_list", "kwargs"}),
    ("abisee/cnn_dailymail", "3.0.0", "test", False, {"article", "highlights", "id"}),
    ("allenai/ai2_arc", "ARC-Easy", "test", False, {"id", "question", "choices", "answerKey"}),
    ("allenai/ai2_arc", "ARC-Challenge", "test", False, {"id", "question", "choices", "answerKey"}),
    ("allenai/winogrande", "winogrande_xl", "validation", False, {"sentence", "option1", "option2", "answer"}),
    ("EleutherAI/coqa", None, "validation", False, {"story", "questions", "answers", "additional_answers"}),
    ("EleutherAI/coqa", None, "train", False, {"story", "questions", "answers"}),
]
# the data files of each hub repo, as the hub lays them out
FILES = {
    "meta-math/MetaMathQA": {"MetaMathQA-395K.json"},
    "openai/gsm8k": {f"{c}/{s}-00000-of-00001.parquet" for c in ("main", "socratic") for s in ("train", "test")},
    "HuggingFaceFW/fineweb-edu": {"sample/350BT/000_00000.parquet"},
    "a-m-team/AM-Thinking-v1-Distilled": {"math.jsonl", "chat.jsonl"},
    "Magpie-Align/Magpie-Pro-300K-Filtered": {"data/train-00000-of-00001.parquet"},
    "Magpie-Align/Magpie-Reasoning-150K": {"data/train-00000-of-00001.parquet"},
    "math-ai/aime25": {"test.jsonl"},
    "Idavidrein/gpqa": {"gpqa_main.csv", "gpqa_diamond.csv", "gpqa_extended.csv"},
    "SaylorTwift/bbh": {f"{t}/test-00000-of-00001.parquet" for t in BBH},
    "google/IFEval": {"ifeval_input_data.jsonl"},
    "abisee/cnn_dailymail": {f"3.0.0/{s}-00000-of-00001.parquet" for s in ("train", "validation", "test")},
    "allenai/ai2_arc": {
        f"{c}/{s}-00000-of-00001.parquet"
        for c in ("ARC-Easy", "ARC-Challenge")
        for s in ("train", "validation", "test")
    },
    "allenai/winogrande": {f"winogrande_xl/{s}-00000-of-00001.parquet" for s in ("train", "validation", "test")},
    "EleutherAI/coqa": {"coqa_train.parquet", "coqa_validation.parquet"},
}


def folder_name(hub_id: str) -> str:
    return hub_id.replace("/", "__")


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("standins")
    return {h: write_dataset_standin(h, root / folder_name(h), rows=ROWS, seed=0) for h in DATASET_STANDINS}


def data_files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "README.md"}


def test_every_hub_dataset_of_the_paper_config_has_a_standin():
    config = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    hub = set()
    for ds in config["datasets"].values():
        paths = ds.get("path", [])
        hub |= {*([paths] if isinstance(paths, str) else paths), ds.get("test", {}).get("path")} - {None}
    assert hub == {
        "meta-math/MetaMathQA",
        "openai/gsm8k",
        "HuggingFaceFW/fineweb-edu",
        "a-m-team/AM-Thinking-v1-Distilled",
        "Magpie-Align/Magpie-Pro-300K-Filtered",
        "Magpie-Align/Magpie-Reasoning-150K",
    }
    assert hub < set(DATASET_STANDINS) == set(FILES)


def test_each_folder_has_the_repo_files_and_a_card_declaring_them(standins):
    for hub_id, folder in standins.items():
        assert data_files(folder) == FILES[hub_id], hub_id
        header = (folder / "README.md").read_text().split("---\n")[1]
        declared = {p for c in yaml.safe_load(header)["configs"] for f in c["data_files"] for p in f["path"]}
        assert declared == FILES[hub_id], hub_id
    assert json.loads((standins["meta-math/MetaMathQA"] / "MetaMathQA-395K.json").read_text())[0]["type"]


@pytest.mark.parametrize(("hub_id", "name", "split", "streaming", "columns"), ASKED)
def test_loads_as_its_consumer_asks(standins, hub_id, name, split, streaming, columns):
    folder = str(standins[hub_id])
    ds = datasets.load_dataset(folder, name=name, split=split, streaming=streaming, cache_dir=local_cache_dir(folder))
    rows = list(ds)
    assert len(rows) == ROWS and columns <= set(rows[0]), (hub_id, set(rows[0]))


def test_metamathqa_rows_read_by_our_loader(standins):
    rows = list(load_metamathqa(str(standins["meta-math/MetaMathQA"])))
    assert len(rows) == ROWS
    for row in rows:
        source, augmentation = row["type"].split("_")
        assert source in ("GSM", "MATH") and augmentation in ("AnsAug", "Rephrased", "SV", "FOBAR")
        final = re.fullmatch(r"(?s).*\nThe answer is: (\d+)", row["response"]).group(1)
        assert (f"\n#### {final}\n" in row["response"]) == (source == "GSM")
    more = list(
        load_metamathqa(
            str(write_dataset_standin("meta-math/MetaMathQA", standins["openai/gsm8k"].parent / "mm40", 40))
        )
    )
    types = {r["type"] for r in more}
    assert {"GSM_AnsAug", "MATH_AnsAug", "GSM_Rephrased", "MATH_Rephrased", "GSM_SV", "GSM_FOBAR"} <= types
    assert len({r["original_question"] for r in more}) >= 8


def test_gsm8k_rows_read_by_our_loader_and_the_math_dataset_builds(standins):
    gsm = str(standins["openai/gsm8k"])
    for config in ("main", "socratic"):
        rows = list(load_gsm8k_test(gsm, config, "test"))
        assert len(rows) == ROWS and all(r["response"].endswith(f"#### {r['answer']}") for r in rows)
    assert all(
        " ** " in line for r in load_gsm8k_test(gsm, "socratic", "train") for line in r["response"].split("\n")[:-1]
    )
    spec = {
        "kind": "metamathqa",
        "path": str(standins["meta-math/MetaMathQA"]),
        "test": {"path": gsm, "name": "main", "split": "test"},
        "validation_fraction": 0.3,
        "split_seed": 0,
    }
    splits, report = build_math(spec, seed=0)
    assert len(splits["test"]) == ROWS and len(splits["train"]) + len(splits["validation"]) == ROWS
    assert report["reads"]["test"]["rows_read"] == ROWS


def test_fineweb_documents_stream_from_the_standin(standins):
    report = ReadReport("fineweb")
    docs = list(fineweb_documents(str(standins["HuggingFaceFW/fineweb-edu"]), "sample-350BT", "error", report))
    assert len(docs) == ROWS == report.rows_read and all(len(d.split()) > 20 for d in docs)


def test_conversations_give_first_turn_rows(standins):
    magpie = [
        str(standins["Magpie-Align/Magpie-Pro-300K-Filtered"]),
        str(standins["Magpie-Align/Magpie-Reasoning-150K"]),
    ]
    rows, counts = first_turn_rows(read_conversations({"kind": "sharegpt", "path": magpie}))
    assert counts == {"conversations": 2 * ROWS, "used": 2 * ROWS, "no_user_turn": 0, "no_answer": 0}
    assert all(re.search(r"\nThe answer is: \d+$", r["response"]) for r in rows)
    am, counts = first_turn_rows(
        read_conversations({"kind": "sharegpt", "path": str(standins["a-m-team/AM-Thinking-v1-Distilled"])})
    )
    assert counts["used"] == ROWS and all(
        re.fullmatch(r"(?s)<think>\n.+\n</think>\n<answer>\n.+\n</answer>", r["response"]) for r in am
    )


def test_am_thinking_files_share_one_schema(standins, tmp_path):
    """datasets reads a split's files into one table: a column typed differently in one file (e.g. null all
    through it) breaks the load whatever the file order."""
    folder = standins["a-m-team/AM-Thinking-v1-Distilled"]
    features = [
        datasets.load_dataset("json", data_files=str(folder / f), split="train", cache_dir=str(tmp_path)).features
        for f in ("math.jsonl", "chat.jsonl")
    ]
    assert features[0] == features[1]


def _rows(standins, hub_id: str, name: str | None, split: str) -> list[dict]:
    folder = str(standins[hub_id])
    return list(datasets.load_dataset(folder, name=name, split=split, cache_dir=local_cache_dir(folder)))


def _answer_shape(answer: str) -> str:
    """The format class of a BBH answer."""
    for shape, pattern in (
        ("bool", r"True|False"),
        ("Yes/No", r"Yes|No"),
        ("yes/no", r"yes|no"),
        ("validity", r"valid|invalid"),
        ("option", r"\([A-R]\)"),
        ("integer", r"-?\d+"),
        ("closers", r"[)\]}>]( [)\]}>])*"),
        ("words", r"[a-z]+( [a-z]+)+"),
    ):
        if re.fullmatch(pattern, answer):
            return shape
    raise AssertionError(f"unknown BBH answer format: {answer!r}")


@pytest.mark.parametrize("subtask", BBH)
def test_bbh_targets_have_the_format_of_lm_evals_exemplar_answers(standins, subtask):
    """The answers of the subtask's few-shot exemplars in lm-eval's YAML ("So the answer is X.") set the format."""
    exemplars = yaml.safe_load((STOCK / f"bbh/cot_fewshot/{subtask}.yaml").read_text())["fewshot_config"]["samples"]
    shapes = {_answer_shape(re.search(r"the answer is (.*)\.$", e["target"]).group(1)) for e in exemplars}
    for row in _rows(standins, "SaylorTwift/bbh", subtask, "test"):
        assert {_answer_shape(row["target"])} == shapes, (subtask, row["target"])
        if shapes == {"option"}:
            assert f"\n{row['target']} " in row["input"]  # the key is one of the listed options
        if shapes == {"words"}:
            assert row["target"].split() == sorted(row["target"].split())


def _closes(opened: str, closers: str) -> bool:
    """Whether `closers` closes the open brackets of `opened` in order (and nothing else)."""
    stack = []
    for token in [*opened.split(), *closers.split()]:
        if token in "([{<":
            stack.append(token)
        elif not stack or "([{<"[")]}>".index(token)] != stack.pop():
            return False
    return not stack


def test_computable_bbh_answers_are_right(tmp_path):
    bbh = str(write_dataset_standin("SaylorTwift/bbh", tmp_path / "bbh", 30))

    def rows(subtask):
        return datasets.load_dataset(bbh, subtask, split="test", cache_dir=local_cache_dir(bbh))

    for row in rows("boolean_expressions"):
        assert str(eval(row["input"].removesuffix(" is"))) == row["target"]
    for row in rows("multistep_arithmetic_two"):
        assert str(eval(row["input"].removesuffix(" ="))) == row["target"]
    for row in rows("dyck_languages"):
        assert _closes(row["input"].split("Input: ")[1], row["target"])
    for row in rows("date_understanding"):
        today, days = re.search(r"Today is (\S+)\. What is the date (\d+) days ago", row["input"]).groups()
        right = datetime.datetime.strptime(today, "%m/%d/%Y") - datetime.timedelta(days=int(days))
        assert f"{row['target']} {right:%m/%d/%Y}" in row["input"]


def test_multiple_choice_rows_have_a_valid_key(tmp_path):
    arc = write_dataset_standin("allenai/ai2_arc", tmp_path / "arc", 40)
    for config in ("ARC-Easy", "ARC-Challenge"):
        for row in _rows({"arc": arc}, "arc", config, "test"):
            labels = row["choices"]["label"]
            assert row["answerKey"] in labels and len(set(row["choices"]["text"])) == len(labels) == 4
    gpqa = write_dataset_standin("Idavidrein/gpqa", tmp_path / "gpqa", 40)
    for row in _rows({"gpqa": gpqa}, "gpqa", "gpqa_main", "train"):
        options = {row["Correct Answer"], *(row[f"Incorrect Answer {i}"] for i in (1, 2, 3))}
        assert len(options) == 4  # lm-eval finds the correct one among the shuffled four by its text
    wino = write_dataset_standin("allenai/winogrande", tmp_path / "wino", 40)
    for split, keys in (("validation", {"1", "2"}), ("test", {""})):
        assert {r["answer"] for r in _rows({"w": wino}, "w", "winogrande_xl", split)} == keys


def test_ifeval_instructions_need_no_download(standins):
    """lm-eval's checks of these instructions need NLTK's punkt data (not downloadable offline) or langdetect
    (random answers on short texts): the stand-in uses none of them."""
    needs = {
        "length_constraints:number_sentences",
        "change_case:capital_word_frequency",
        "language:response_language",
        "change_case:english_capital",
        "change_case:english_lowercase",
    }
    rows = _rows(standins, "google/IFEval", None, "train")
    assert all(r["instruction_id_list"] and not needs & set(r["instruction_id_list"]) for r in rows)
    assert all(len(r["kwargs"]) == len(r["instruction_id_list"]) for r in rows)


def test_coqa_turns_line_up(standins):
    """What the coqa task reads (our local re-implementation of lm-eval's, `evaluate/tasks/coqa.py`): one answer
    and three additional answers per question, each answer's rationale a span of the story."""
    for row in _rows(standins, "EleutherAI/coqa", None, "validation"):
        turns = len(row["questions"]["input_text"])
        assert turns >= 2 and row["questions"]["turn_id"] == list(range(1, turns + 1))
        assert sorted(row["additional_answers"]) == ["0", "1", "2"]
        for answers in [row["answers"], *row["additional_answers"].values()]:
            assert len(answers["input_text"]) == turns and all(answers["input_text"])
            for start, end, text in zip(answers["span_start"], answers["span_end"], answers["span_text"]):
                assert row["story"][start:end] == text


def test_deterministic_in_the_seed(tmp_path):
    for hub_id in DATASET_STANDINS:
        a, b, c = (
            write_dataset_standin(hub_id, tmp_path / f"{d}/{folder_name(hub_id)}", 3, s)
            for d, s in (("a", 5), ("b", 5), ("c", 6))
        )
        for rel in FILES[hub_id]:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), (hub_id, rel)
            if hub_id != "allenai/winogrande" or "test" not in rel:  # its test answers are blank whatever the seed
                assert (a / rel).read_bytes() != (c / rel).read_bytes(), (hub_id, rel)


def test_a_rewritten_or_same_named_folder_is_not_read_from_a_stale_cache(tmp_path):
    """datasets caches a local folder under its base name alone: without `local_cache_dir` the second and third
    reads below would return the first one's 2 rows."""
    a, b = tmp_path / "a/meta-math__MetaMathQA", tmp_path / "b/meta-math__MetaMathQA"
    for folder, rows in ((a, 2), (b, 3), (a, 5)):
        write_dataset_standin("meta-math/MetaMathQA", folder, rows, seed=rows)
        assert len(list(load_metamathqa(str(folder)))) == rows


def test_unknown_id_bad_rows_and_replacement(tmp_path):
    with pytest.raises(InputError, match=r"no stand-in for hub dataset 'openai/gsm9k' \(stand-ins: .*openai/gsm8k"):
        write_dataset_standin("openai/gsm9k", tmp_path / "x", 2)
    with pytest.raises(InputError, match="rows must be at least 1, got 0"):
        write_dataset_standin("openai/gsm8k", tmp_path / "x", 0)
    assert not (tmp_path / "x").exists()
    out = tmp_path / "aime"
    out.mkdir()
    (out / "stale.jsonl").write_text("{}\n")
    write_dataset_standin("math-ai/aime25", out, 2)
    assert data_files(out) == {"test.jsonl"}


def _rename_column(path: Path, old: str, new: str) -> None:
    table = pq.read_table(path)
    pq.write_table(table.rename_columns([new if c == old else c for c in table.column_names]), path)


def test_wrong_format_folders_fail_in_the_consumer_naming_folder_and_column(tmp_path):
    mm = write_dataset_standin("meta-math/MetaMathQA", tmp_path / "mm", 2)
    rows = json.loads((mm / "MetaMathQA-395K.json").read_text())
    (mm / "MetaMathQA-395K.json").write_text(json.dumps([{"question": r.pop("query"), **r} for r in rows]))
    with pytest.raises(BadRowError, match=rf"{mm}: row 1: missing field 'query'"):
        list(load_metamathqa(str(mm)))

    fw = write_dataset_standin("HuggingFaceFW/fineweb-edu", tmp_path / "fw", 2)
    _rename_column(fw / "sample/350BT/000_00000.parquet", "text", "content")
    with pytest.raises(BadRowError, match=rf"{fw}: row 1: missing field 'text'"):
        list(fineweb_documents(str(fw), "sample-350BT", "error", ReadReport("fw")))

    mp = write_dataset_standin("Magpie-Align/Magpie-Pro-300K-Filtered", tmp_path / "mp", 2)
    _rename_column(mp / "data/train-00000-of-00001.parquet", "conversations", "messages")
    with pytest.raises(BadRowError, match=rf"{mp}: row 1: missing field 'conversations' \(fields: .*messages"):
        list(read_conversations({"path": str(mp)}))

    gsm = write_dataset_standin("openai/gsm8k", tmp_path / "gsm", 2)
    with pytest.raises(
        DatasetLoadError, match=r"name='mainx'.*BuilderConfig 'mainx' not found. Available: \['main', 'socratic'\]"
    ):
        list(load_gsm8k_test(str(gsm), "mainx", "test"))
    (gsm / "main/test-00000-of-00001.parquet").rename(gsm / "main/validation-00000-of-00001.parquet")
    card = yaml.safe_load((gsm / "README.md").read_text().split("---\n")[1])
    card["configs"][0]["data_files"][1] = {"split": "validation", "path": ["main/validation-00000-of-00001.parquet"]}
    (gsm / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n")
    with pytest.raises(
        DatasetLoadError, match=r"split='test'.*Unknown split \"test\". Should be one of \['train', 'validation'\]"
    ):
        list(load_gsm8k_test(str(gsm), "main", "test"))
