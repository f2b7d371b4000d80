"""Paper-scale math data: MetaMathQA (Yu et al. 2023) for training, GSM8K test for evaluation.

MetaMathQA comes from the hub (`meta-math/MetaMathQA`, `datasets.load_dataset(path, split="train")`) or a
local `.json` array / `.jsonl` file with the fields `query`, `response`, `type`, `original_question`. The
GSM8K test set comes from the hub (`openai/gsm8k`, name `main`, split `test`) or a local file with
`question` / `answer` (the answer's final line is `#### N`).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..io import ReadReport, require_text_fields
from .records import read_records

METAMATHQA_FIELDS = ("query", "response", "type", "original_question")
GSM8K_TYPE = "GSM8K"
_check_metamathqa = require_text_fields(*METAMATHQA_FIELDS)
_check_gsm8k_text = require_text_fields("question", "answer")


def load_metamathqa(path: str, on_bad_row: str = "error", report: ReadReport | None = None) -> Iterator[dict]:
    """MetaMathQA rows reduced to the four fields; bad rows raise BadRowError or are skipped and counted."""
    for row in read_records(path, _check_metamathqa, on_bad_row, report, split="train"):
        yield {k: row[k] for k in METAMATHQA_FIELDS}


def gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: the text after the last `####`, commas removed."""
    if "####" not in solution:
        raise ValueError("field 'answer' has no '#### <number>' line")
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    try:
        float(answer)
    except ValueError:
        raise ValueError(f"final answer {answer!r} after '####' is not a number") from None
    return answer


def check_gsm8k_row(row: dict) -> None:
    """Row validator of GSM8K: `question`, and an `answer` whose last line is `#### <number>`."""
    _check_gsm8k_text(row)
    gsm8k_answer(row["answer"])


def load_gsm8k_test(
    path: str,
    name: str | None = None,
    split: str = "test",
    on_bad_row: str = "error",
    report: ReadReport | None = None,
) -> Iterator[dict]:
    """GSM8K rows as test rows: `query` = question, `response` = the reference solution, `answer` = its final
    number, `type` = "GSM8K", `original_question` = question."""
    for row in read_records(path, check_gsm8k_row, on_bad_row, report, name=name, split=split):
        yield {
            "query": row["question"],
            "response": row["answer"],
            "answer": gsm8k_answer(row["answer"]),
            "type": GSM8K_TYPE,
            "original_question": row["question"],
        }
