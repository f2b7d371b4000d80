"""Paper 4's generative task YAMLs (ARC-Easy, ARC-Challenge, WinoGrande; hub data at paper scale), run offline on
local JSONL fixtures with the include-and-override pattern: the prompt lists the options, the last "The answer is X"
is extracted and compared with the key."""

from __future__ import annotations

import json

import pytest
from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager

from mtp_core.decoding.base import Decoder, GenerationResult
from mtp_core.evaluate.lm import MTPLM
from mtp_core.evaluate.tasks import write_task_yaml

ARC = [
    {
        "id": "a",
        "question": "Which is a liquid?",
        "choices": {"text": ["rock", "water", "iron"], "label": ["A", "B", "C"]},
        "answerKey": "B",
    },
    {
        "id": "b",
        "question": "What gives light?",
        "choices": {"text": ["sun", "moon", "soil"], "label": ["A", "B", "C"]},
        "answerKey": "A",
    },
    {
        "id": "c",
        "question": "Which is a gas?",
        "choices": {"text": ["ice", "steam", "wood", "salt"], "label": ["A", "B", "C", "D"]},
        "answerKey": "B",
    },
]
WINO = [
    {
        "sentence": "The cup fell off the table because _ was slippery.",
        "option1": "the cup",
        "option2": "the table",
        "answer": "2",
    },
    {"sentence": "Anna thanked Maria because _ had helped.", "option1": "Anna", "option2": "Maria", "answer": "1"},
]


class Canned(Decoder):
    """Answers every prompt with the same text, and remembers the prompts it saw."""

    name = "canned"

    def __init__(self, model, tokenizer, text: str):
        super().__init__(model, tokenizer)
        self.text, self.seen = text, []

    def generate(self, prompts, max_new_tokens, stop):
        self.seen += [self.tokenizer.decode(p) for p in prompts]
        ids = self.tokenizer(self.text, add_special_tokens=False).input_ids
        return [GenerationResult(ids, [1] * len(ids), len(p), 0.0, 0.0, "eos") for p in prompts]


@pytest.mark.parametrize(
    ("task", "rows", "answer", "expected", "shown"),
    [
        ("arc_easy_dmtd", ARC, "Water flows, so... The answer is (B).", 2 / 3, "B. water\nC. iron\n"),
        ("arc_challenge_dmtd", ARC, "The answer is A, no wait. The answer is B", 2 / 3, "D. salt\n"),
        ("winogrande_dmtd", WINO, "Slippery things fall. The answer is 2.", 1 / 2, "Option 2: the table\n"),
        # markdown and LaTeX around the answer, as chat models write it; "Both" is no letter
        ("arc_easy_dmtd", ARC, "Steam is water as a gas.\n\n**The answer is: **B****", 2 / 3, "A. rock\n"),
        ("arc_easy_dmtd", ARC, "The answer is $\\boxed{B}$. The answer is Both", 2 / 3, "A. rock\n"),
        ("winogrande_dmtd", WINO, "The answer is **Option 2**.", 1 / 2, "Option 1: the cup\n"),
    ],
)
def test_generative_task_on_local_rows(tiny_llama, tmp_path, task, rows, answer, expected, shown):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp_path / "tasks"
    template = write_task_yaml(task, None, tasks)
    (tasks / "local.yaml").write_text(
        f"include: {template}\ntask: {task}_local\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs: {{data_files: {{test: {data}, validation: {data}}}}}\n"
    )
    decoder = Canned(tiny_llama.model, tiny_llama.tokenizer, answer)
    res = simple_evaluate(
        model=MTPLM(tiny_llama, decoder, batch_size=2),
        tasks=[f"{task}_local"],
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        apply_chat_template=False,
        bootstrap_iters=0,
        gen_kwargs={"max_gen_toks": 16},
    )
    assert res["results"][f"{task}_local"]["exact_match,last-answer"] == pytest.approx(expected)
    assert len(decoder.seen) == len(rows) and any(shown in p for p in decoder.seen)
    assert all(p.rstrip().endswith("option.") or "The answer is 2" in p for p in decoder.seen)
