"""The local `coqa` task's helpers (`mtp_core.evaluate.tasks.coqa`) against lm-eval 0.4.13's built-in `coqa`: the
prompt and the gold answers of hand-written documents, spelled out by hand from the built-in's definition; SQuAD's
em and f1 on hand-computed examples (normalisation, multiplicity, no-answer rule); the leave-one-out maximum over
several golds; and, on seeded random documents, agreement with the stock helpers themselves, their missing
transformers import stood in by two stubs."""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from pathlib import Path

import lm_eval.tasks
import pytest
import yaml

from mtp_core.evaluate.tasks import coqa, write_task_yaml

KITE = {
    "story": "Tom has a red kite. He flies it on Sunday.",
    "questions": {"input_text": ["What does Tom have?", "What color is it?", "When does he fly it?"]},
    "answers": {"input_text": ["a kite", "red", "on Sunday"]},
    "additional_answers": {
        "0": {"input_text": ["kite", "Red", "Sunday"]},
        "1": {"input_text": ["a kite", "red", "ON SUNDAY"]},
        "2": {"input_text": ["a red kite", "red", "sunday"]},
    },
}


def test_prompt_holds_the_story_and_every_earlier_turn_and_leaves_the_last_answer_open():
    assert coqa.doc_to_text(KITE) == (
        "Tom has a red kite. He flies it on Sunday.\n\n"
        "Q: What does Tom have?\n\nA: a kite\n\n"
        "Q: What color is it?\n\nA: red\n\n"
        "Q: When does he fly it?\n\nA:"
    )
    one_turn = {"story": "Ann sings.", "questions": {"input_text": ["Who sings?"]}, "answers": {"input_text": ["Ann"]}}
    assert coqa.doc_to_text(one_turn) == "Ann sings.\n\nQ: Who sings?\n\nA:"


def test_golds_are_the_last_answer_then_the_additional_answers_not_kept_yet_in_any_case():
    # "ON SUNDAY" repeats the answer, "sunday" the first additional answer
    assert coqa.doc_to_target(KITE) == ["on Sunday", "Sunday"]
    one_turn = {"story": "Ann sings.", "questions": {"input_text": ["Who sings?"]}, "answers": {"input_text": ["Ann"]}}
    assert coqa.doc_to_target(one_turn) == ["Ann"]  # no additional answers (the train split's documents)


def test_train_placeholders_are_skipped_where_they_do_not_reach_the_turn():
    """The train split's one-entry placeholders: past turn 1 the built-in fails, we skip them (module docstring); at
    turn 1 the built-in keeps the empty placeholder once, and so do we."""
    placeholder = {"input_text": [""], "turn_id": [-1]}
    extra = {key: placeholder for key in ("0", "1", "2")}
    two_turns = {**KITE, "questions": {"input_text": ["a?", "b?"]}, "answers": {"input_text": ["x", "y"]}}
    assert coqa.doc_to_target({**two_turns, "additional_answers": extra}) == ["y"]
    one_turn = {**KITE, "questions": {"input_text": ["a?"]}, "answers": {"input_text": ["x"]}}
    assert coqa.doc_to_target({**one_turn, "additional_answers": extra}) == ["x", ""]


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The  Cat's hat!", "cats hat"),  # lower case, punctuation dropped, article dropped, spaces collapsed
        ("Anna ate a banana, an apple", "anna ate banana apple"),  # articles only as whole words
        ("the-end", "theend"),  # punctuation goes before articles: no word "the" is left
        ("\tA  b\n", "b"),
        ("", ""),
    ],
)
def test_squad_normalisation(text, normalised):
    assert coqa.normalize_answer(text) == normalised


@pytest.mark.parametrize(
    ("gold", "prediction", "em", "f1"),
    [
        ("The Eiffel Tower", "eiffel tower.", 1.0, 1.0),
        ("the big red dog", "a big dog", 0.0, 0.8),  # P = 2/2, R = 2/3
        ("dog dog cat", "dog dog dog", 0.0, 2 / 3),  # shared tokens counted with multiplicity: 2 of 3 each way
        ("cat", "dog", 0.0, 0.0),
        ("end", "the-end", 0.0, 0.0),
        ("", "", 1.0, 1.0),  # SQuAD's no-answer rule: empty against empty
        ("the", "an", 1.0, 1.0),  # both empty once normalised
        ("", "something", 0.0, 0.0),
        ("yes", "", 0.0, 0.0),
    ],
)
def test_em_and_f1_of_one_gold(gold, prediction, em, f1):
    assert coqa.exact_match(gold, prediction) == em
    assert coqa.token_f1(gold, prediction) == pytest.approx(f1)


def test_several_golds_take_the_mean_of_leave_one_out_maxima():
    golds = ["blue", "light blue", "navy"]
    # f1 of "blue": 1 / 2/3 / 0; leaving out each gold in turn, the best of the rest: 2/3, 1, 1
    assert coqa.over_golds(golds, "blue", coqa.token_f1) == pytest.approx(8 / 9)
    assert coqa.over_golds(golds, "blue", coqa.exact_match) == pytest.approx(2 / 3)  # 0, 1, 1
    assert coqa.over_golds(["Paris"], "paris.", coqa.exact_match) == 1.0  # one gold: its own score


def test_process_results_scores_the_first_line_against_the_golds():
    doc = {
        "story": "The sky was blue.",
        "questions": {"input_text": ["What color?"]},
        "answers": {"input_text": ["blue"]},
        "additional_answers": {
            "0": {"input_text": ["Blue"]},
            "1": {"input_text": ["light blue"]},
            "2": {"input_text": ["navy"]},
        },
    }
    scores = coqa.process_results(doc, ["\n  Blue!\nQ: And the sea?"])
    assert scores == pytest.approx({"em": 2 / 3, "f1": 8 / 9})
    assert coqa.process_results(doc, ["Green, dark green."]) == {"em": 0.0, "f1": 0.0}


def test_the_task_yaml_is_materialised_with_its_helper_module(tmp_path):
    yaml_path = write_task_yaml("coqa", None, tmp_path)
    text = yaml_path.read_text()
    assert "dataset_path: EleutherAI/coqa" in text and "!function coqa.process_results" in text
    assert (tmp_path / "coqa.py").read_bytes() == Path(coqa.__file__).read_bytes()


def _task_config(path: Path) -> dict:
    """A task YAML with each `!function module.name` read as "!function name" (the module names differ)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: f"!function {node.value.rsplit('.', 1)[-1]}")
    return yaml.load(path.read_text(), Loader=Loader)


def test_the_task_config_is_the_built_ins(tmp_path):
    """Data, splits, generation settings, metrics and version as lm-eval 0.4.13's `coqa/default.yaml`; only the
    decontamination query names the documents' real field (module docstring)."""
    ours = _task_config(write_task_yaml("coqa", None, tmp_path))
    stock = _task_config(Path(lm_eval.tasks.__file__).parent / "coqa" / "default.yaml")
    assert ours.pop("doc_to_decontamination_query") == "{{story}} {{questions.input_text|join('\n')}}"
    assert stock.pop("doc_to_decontamination_query") == "{{story}} {{question.input_text|join('\n')}}"
    assert ours == stock


def _random_doc(rng: random.Random, words: list[str]) -> dict:
    def phrase() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))

    turns = rng.randint(1, 6)
    answers = [phrase() for _ in range(turns)]
    doc = {
        "story": f"{phrase()}. {phrase()}.",
        "questions": {"input_text": [f"{phrase()}?" for _ in range(turns)]},
        "answers": {"input_text": answers},
    }
    if rng.random() < 0.8:  # validation-like: three more answers per turn, often a case variant of the first
        variants = [lambda a: a, str.upper, str.title, lambda a: phrase()]
        doc["additional_answers"] = {
            key: {"input_text": [rng.choice(variants)(a) for a in answers]} for key in ("0", "1", "2")
        }
    return doc


@pytest.fixture
def stock_coqa(monkeypatch):
    """lm-eval 0.4.13's own `coqa/utils.py`, its import of transformers' removed SQuAD module served by stubs that
    call our em and f1 (so its prompt, golds, first-line cut and aggregation over golds are compared)."""
    squad = types.ModuleType("transformers.data.metrics.squad_metrics")
    squad.compute_exact, squad.compute_f1 = coqa.exact_match, coqa.token_f1
    metrics = types.ModuleType("transformers.data.metrics")
    metrics.squad_metrics = squad
    monkeypatch.setitem(sys.modules, "transformers.data.metrics", metrics)
    monkeypatch.setitem(sys.modules, "transformers.data.metrics.squad_metrics", squad)
    path = Path(lm_eval.tasks.__file__).parent / "coqa" / "utils.py"
    spec = importlib.util.spec_from_file_location("stock_coqa_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agrees_with_the_stock_helpers_on_random_documents(stock_coqa):
    rng = random.Random(0)
    words = ["the", "a", "An", "dog", "Dog", "cat", "red,", "blue!", "it's", "-", "x", "x"]
    for _ in range(300):
        doc = _random_doc(rng, words)
        assert coqa.doc_to_text(doc) == stock_coqa.doc_to_text(doc)
        assert coqa.doc_to_target(doc) == stock_coqa.doc_to_target(doc)
        generation = rng.choice([" ", "\n"]).join(rng.choice(words) for _ in range(rng.randint(0, 6)))
        ours, stock = coqa.process_results(doc, [generation]), stock_coqa.process_results(doc, [generation])
        assert ours == pytest.approx(stock), (doc, generation)
