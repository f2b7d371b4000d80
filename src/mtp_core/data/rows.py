"""(query, response) training rows: where they live, how they are read and how one is rendered as text.

Every training on rows reads them the same way: paper 1's student (§5.1, App. A.1 "Chat Templating"), the
fine-tunes of `finetuned` models (`train.sft`) and the later papers' trainings on the same data. A row becomes
* `chat`: the tokenizer's chat template over [user: query, assistant: response], without a generation prompt
  (the official code's `query_resp_chat`), to be tokenised with `add_special_tokens=False`;
* `plain`: `bos + query + "\\n\\n" + response`, bos = the tokenizer's BOS token or "" (`join_query_resp_bos`);
`auto` is the model's `chat_template` flag.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..io import read_jsonl, require_text_fields

RESULTS = "results"
TEMPLATES = ("auto", "chat", "plain")
MATH_KINDS = ("synthetic_math", "metamathqa")
TRAIN_DATA_KINDS = (*MATH_KINDS, "sharegpt")  # dataset kinds whose rows can be trained on


def train_data_path(dataset: str, results: str = RESULTS) -> str:
    """The train rows of a dataset: the train split of a math dataset, or the first-turn pairs of a conversation
    dataset (kind sharegpt: Magpie at paper scale), both at `results/data/<name>/train.jsonl`."""
    return f"{results}/data/{dataset}/train.jsonl"


def read_rows(path: str | os.PathLike, on_bad_row: str = "error") -> list[dict]:
    """Rows of a train file: `query` and `response` must be strings (a bad row names file and row)."""
    return list(read_jsonl(path, validate=require_text_fields("query", "response"), on_bad_row=on_bad_row))


def resolve_template(template: str, chat_template: bool) -> str:
    """`auto` -> the model's flag (chat | plain); chat and plain stay."""
    if template not in TEMPLATES:
        raise ValueError(f"template {template!r} is not one of {', '.join(TEMPLATES)}")
    return ("chat" if chat_template else "plain") if template == "auto" else template


def render_example(row: dict, tokenizer: Any, template: str) -> str:
    """The training text of one (query, response) row under `template` (chat | plain)."""
    if template == "chat":
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("template 'chat' needs a tokenizer with a chat template")
        messages = [{"role": "user", "content": row["query"]}, {"role": "assistant", "content": row["response"]}]
        return tokenizer.apply_chat_template(messages, tokenize=False)
    if template == "plain":
        return (tokenizer.bos_token or "") + row["query"] + "\n\n" + row["response"]
    raise ValueError(f"template must be 'chat' or 'plain', got {template!r}")


def response_start(example: Sequence[int], prompt: Sequence[int]) -> int:
    """Index of a tokenised example's first response token: where it stops agreeing with its tokenised prompt
    (`render_prompt`), at least 1; the prompt's length unless a merge crosses the boundary."""
    n = min(len(example), len(prompt))
    for i in range(n):  # a loop over one row's prompt, once per row at load time
        if example[i] != prompt[i]:
            return max(1, i)
    return max(1, n)


def render_prompt(row: dict, tokenizer: Any, template: str) -> str:
    """The part of `render_example(row)` that precedes the response (with the assistant's turn opened)."""
    if template == "chat":
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": row["query"]}], tokenize=False, add_generation_prompt=True
        )
    return (tokenizer.bos_token or "") + row["query"] + "\n\n"
