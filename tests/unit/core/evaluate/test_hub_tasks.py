"""lm-eval's tasks of the paper config on the hub stand-ins, offline, under `hub_datasets_from`: every built-in
task builds through the task manager of `task_manager_for` (the stock folder that declares it, indexed as lm-eval
indexes it) as do our local tasks; each yields the stand-in's docs, renders its prompt from them, and its metric scores a canned
right answer 1 and a canned wrong answer 0 (a model that answers right on even documents and wrong on odd ones).
And the redirect itself: mapped hub ids read their folder, everything else passes through, the original
`datasets.load_dataset` comes back on exit and on error."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import datasets
import lm_eval.tasks
import pytest
from lm_eval import simple_evaluate
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager
from lm_eval.tasks._index import Kind

from mtp_core.data.hub.datasets import write_dataset_standin
from mtp_core.evaluate.hub_data import hub_datasets_from
from mtp_core.evaluate.tasks import task_manager_for

pytestmark = pytest.mark.usefixtures("datasets_cache_in_tmp")
ROWS = 3
STOCK = Path(lm_eval.tasks.__file__).parent
IFEVAL_READY = all(importlib.util.find_spec(m) for m in ("langdetect", "immutabledict"))
# task -> (hub id, the metric the paper config reports, the doc field its prompt shows); lm-eval 0.4.13's YAMLs
BUILTIN = {
    "gsm8k_cot": ("openai/gsm8k", "exact_match,flexible-extract", "question"),
    "aime25": ("math-ai/aime25", "exact_match,none", "problem"),
    "gpqa_main_cot_n_shot": ("Idavidrein/gpqa", "exact_match,flexible-extract", "Question"),
    "cnn_dailymail_abisee": ("abisee/cnn_dailymail", "rougeL,none", "article"),
    "bbh_cot_fewshot": ("SaylorTwift/bbh", "exact_match,get-answer", "input"),
    "ifeval": ("google/IFEval", "prompt_level_loose_acc,none", "prompt"),
}
LOCAL = {
    "gsm8k_cot_singleshot": ("openai/gsm8k", "exact_match,flexible-extract", "question"),
    "arc_easy_dmtd": ("allenai/ai2_arc", "exact_match,last-answer", "question"),
    "arc_challenge_dmtd": ("allenai/ai2_arc", "exact_match,last-answer", "question"),
    "winogrande_dmtd": ("allenai/winogrande", "exact_match,last-answer", "sentence"),
    "coqa": ("EleutherAI/coqa", "f1,none", "story"),  # lm-eval's own cannot import under transformers 5
}
STOCK_DIRS = {"gsm8k_cot": "gsm8k", "aime25": "aime", "gpqa_main_cot_n_shot": "gpqa/cot_n_shot",
              "cnn_dailymail_abisee": "cnn_dailymail", "bbh_cot_fewshot": "bbh/cot_fewshot", "ifeval": "ifeval"}  # fmt: skip
FLIP = {"True": "False", "False": "True", "Yes": "No", "No": "Yes", "yes": "no", "no": "yes"}
FLIP |= {"valid": "invalid", "invalid": "valid"}


def wrong_target(target: str) -> str:
    """A wrong answer in the target's own format where it has one."""
    if target in FLIP:
        return FLIP[target]
    if re.fullmatch(r"\([A-Z]\)", target):
        return "(B)" if target == "(A)" else "(A)"
    if re.fullmatch(r"-?\d+", target):
        return str(int(target) + 1)
    return f"{target} extra"


def ifeval_compliant(doc: dict) -> str:
    """A response that follows every instruction of an IFEval row, built from its kwargs."""
    title, body, postscript, end = "", ["A plan for the day"], "", ""
    for instruction, kwargs in zip(doc["instruction_id_list"], doc["kwargs"]):
        kw = {k: v for k, v in kwargs.items() if v is not None}
        if instruction == "detectable_format:title":
            title = "<<Day Plan>>"
        elif instruction == "keywords:existence":
            body += kw["keywords"]
        elif instruction == "detectable_content:number_placeholders":
            body += [f"[slot {i}]" for i in range(kw["num_placeholders"])]
        elif instruction == "detectable_format:number_highlighted_sections":
            body += [f"*part {i}*" for i in range(kw["num_highlights"])]
        elif instruction == "keywords:letter_frequency":
            body.append(kw["letter"] * kw["let_frequency"])
        elif instruction == "length_constraints:number_words":
            body += ["word"] * kw["num_words"]
        elif instruction == "detectable_content:postscript":
            postscript = f"{kw['postscript_marker']} that is all"
        elif instruction == "startend:end_checker":
            end = kw["end_phrase"]
        elif instruction != "punctuation:no_comma":  # the text above has no comma
            raise AssertionError(f"no compliant text for {instruction}")
    return "\n".join(line for line in (title, " ".join(body), postscript, end) if line)


def answer(task: str, doc: dict, right: bool) -> str:
    if task.startswith("gsm8k"):
        n = int(doc["answer"].split("####")[-1])
        return f"Step by step. The answer is {n if right else n + 1}."
    if task == "aime25":
        return f"So the answer is $\\boxed{{{int(doc['answer']) + (not right)}}}$."
    if task.startswith("gpqa"):
        return f"The answer is {doc['answer'] if right else wrong_target(doc['answer'])}."
    if task.startswith("bbh"):
        return f"So the answer is {doc['target'] if right else wrong_target(doc['target'])}."
    if task == "ifeval":
        return ifeval_compliant(doc) if right else "Sorry, no."
    if task.startswith("cnn"):
        return doc["highlights"] if right else "Nothing of note happened anywhere yesterday."
    if task.startswith("arc"):
        wrong = next(label for label in doc["choices"]["label"] if label != doc["answerKey"])
        return f"Thinking it over. The answer is {doc['answerKey'] if right else wrong}"
    if task.startswith("winogrande"):
        return f"The answer is {doc['answer'] if right else {'1': '2', '2': '1'}[doc['answer']]}"
    if task == "coqa":  # only the first line counts, normalised
        return f"{doc['answers']['input_text'][-1].upper()}.\nQ: And then?" if right else "Nobody can tell."
    raise AssertionError(task)


class Canned(LM):
    """Answers right on even documents and wrong on odd ones; remembers every prompt."""

    def __init__(self):
        super().__init__()
        self.prompts: dict[tuple[str, int], str] = {}

    def generate_until(self, requests):
        out = []
        for r in requests:
            self.prompts[(r.task_name, r.doc_id)] = r.args[0]
            out.append(answer(r.task_name, r.doc, right=r.doc_id % 2 == 0))
        return out

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub")
    hub_ids = {hub for hub, _, _ in [*BUILTIN.values(), *LOCAL.values()]}
    return {h: write_dataset_standin(h, root / h.replace("/", "__"), rows=ROWS, seed=0) for h in hub_ids}


@pytest.fixture(scope="module")
def evaluated(folders, tmp_path_factory) -> tuple[dict, dict, dict]:
    """The results and samples of every task, and the model's prompts per (task, doc id)."""
    lm = Canned()
    results, samples = {}, {}
    runs = [([t], task_manager_for(t)) for t in BUILTIN if t != "ifeval" or IFEVAL_READY]
    runs += [([t], task_manager_for(t, None, tmp_path_factory.mktemp(t))) for t in LOCAL]
    with hub_datasets_from(folders):
        for tasks, manager in runs:
            res = simple_evaluate(model=lm, tasks=tasks, task_manager=manager, bootstrap_iters=0, log_samples=True)
            results |= res["results"]
            samples |= res["samples"]
    return results, samples, lm.prompts


def per_doc(samples: list[dict], metric: str) -> dict[int, float]:
    name, filter_ = metric.split(",")
    return {s["doc_id"]: float(s[name]) for s in samples if s["filter"] == filter_}


@pytest.mark.parametrize("task", [*BUILTIN, *LOCAL])
def test_task_builds_renders_and_scores_on_the_standin(evaluated, task):
    if task == "ifeval" and not IFEVAL_READY:
        pytest.skip("lm-eval[ifeval] (langdetect, immutabledict) is missing: `make venv` installs it (pyproject.toml)")
    results, samples, prompts = evaluated
    hub_id, metric, field = {**BUILTIN, **LOCAL}[task]
    subtasks = sorted(t for t in samples if t.startswith(f"{task}_")) if task == "bbh_cot_fewshot" else [task]
    assert len(subtasks) == (27 if task == "bbh_cot_fewshot" else 1)
    for t in subtasks:
        assert results[t]["sample_len"] == ROWS
        scores = per_doc(samples[t], metric)
        assert sorted(scores) == list(range(ROWS)), t
        for doc_id, score in scores.items():
            if doc_id % 2 == 0:
                assert score == 1.0, (t, doc_id)
            else:
                assert score < 0.35 if task.startswith("cnn") else score == 0.0, (t, doc_id, score)
        for s in samples[t]:
            assert s["doc"][field] and s["doc"][field] in prompts[(t, s["doc_id"])], (t, s["doc_id"])
    if task == "bbh_cot_fewshot":
        assert results[task][metric] == pytest.approx(2 / 3)  # the group: 2 of 3 right in each subtask
    if task.startswith("gpqa"):
        doc = samples[task][0]["doc"]
        prompt = prompts[(task, samples[task][0]["doc_id"])]
        assert all(f"({letter}) {doc[f'choice{i}']}" in prompt for i, letter in enumerate("ABCD", 1))


def test_a_builtins_manager_indexes_its_folder_as_lm_eval_does():
    """`task_manager_for(<built-in>)` indexes only the stock folder that declares the task (lm-eval's whole index
    parses ~14,000 YAMLs, ~14 s an evaluation), and each task and group it knows is lm-eval's own entry of that
    name (same file, same parsed config); a group's tasks are all in it."""
    full = TaskManager().task_index
    for task, folder in STOCK_DIRS.items():
        index = task_manager_for(task).task_index
        assert task in index and len(index) < len(full) / 20, task
        assert index[task].yaml_path.parent == STOCK / folder, task
        assert all(e.yaml_path.is_relative_to(STOCK / folder) for e in index.values() if e.yaml_path), task
        for name, entry in index.items():
            if entry.kind is not Kind.TAG:  # a tag gathers tasks from every folder
                assert entry == full[name], name
        if index[task].kind is Kind.GROUP:
            members = [m if isinstance(m, str) else m["task"] for m in index[task].cfg["task"]]
            assert members and all(m in index for m in members), task


def test_coqa_asks_the_last_question_and_scores_em_and_f1(evaluated):
    """Our `coqa` (lm-eval's built-in re-implemented): the prompt ends on the last question with its answer open,
    em and f1 give the right answers 1 and the wrong ones 0."""
    results, samples, prompts = evaluated
    for s in samples["coqa"]:
        question = s["doc"]["questions"]["input_text"][-1]
        assert prompts[("coqa", s["doc_id"])].endswith(f"Q: {question}\n\nA:")
    assert per_doc(samples["coqa"], "em,none") == {0: 1.0, 1: 0.0, 2: 1.0}
    assert results["coqa"]["em,none"] == results["coqa"]["f1,none"] == pytest.approx(2 / 3)


def test_redirect_reads_the_mapped_folder_and_passes_the_rest_through(folders, tmp_path):
    gsm = folders["openai/gsm8k"]
    local = tmp_path / "rows.jsonl"
    local.write_text(json.dumps({"a": 1}) + "\n")
    with hub_datasets_from({"openai/gsm8k": gsm}):
        by_position = datasets.load_dataset("openai/gsm8k", "main", split="test")
        by_keyword = datasets.load_dataset(path="openai/gsm8k", name="main", split="test")
        assert by_position["question"] == by_keyword["question"] and len(by_position) == ROWS
        assert datasets.load_dataset("json", data_files=str(local), split="train")[0] == {"a": 1}
        with pytest.raises(ConnectionError, match="openai/gsm8k-unmapped"):
            datasets.load_dataset("openai/gsm8k-unmapped", split="test")
    expected = datasets.load_dataset(str(gsm), "main", split="test", cache_dir=str(tmp_path / "cache"))
    assert by_position["question"] == expected["question"]


def test_redirect_reads_a_rewritten_folder_anew(tmp_path):
    """Not the rows datasets cached for an earlier folder of the same name (it names a local folder's cache by its
    base name alone)."""
    for root, rows in (("a", 2), ("b", 3), ("a", 4)):
        folder = write_dataset_standin("math-ai/aime25", tmp_path / root / "math-ai__aime25", rows, seed=rows)
        with hub_datasets_from({"math-ai/aime25": folder}):
            assert len(datasets.load_dataset("math-ai/aime25", split="test")) == rows


def test_redirect_restores_load_dataset_on_exit_and_on_error(folders):
    original = datasets.load_dataset
    with hub_datasets_from(folders):
        assert datasets.load_dataset is not original
    assert datasets.load_dataset is original
    with pytest.raises(RuntimeError, match="boom"), hub_datasets_from(folders):
        raise RuntimeError("boom")
    assert datasets.load_dataset is original
