"""Scoring a generated answer against a math reference the way the `synthetic_math_cot` task scores it
(`tasks/synthetic_math_cot.yaml`, lm-eval's GSM8K-style `flexible-extract` filter and `exact_match` metric), for
generations made outside lm-eval (the leaderboard's bench runs on the math prompt set).

* extraction (`flexible-extract`): the LAST match of `(-?[$0-9.,]{2,})|(-?[0-9]+)` in the generation, taking the
  first non-empty group, stripped (lm-eval's `regex` filter with `group_select: -1`), "[invalid]" when nothing
  matches;
* comparison (`exact_match` with `ignore_case` and `regexes_to_ignore: [",", "\\$", "(?s).*#### ", "\\.$"]`): both
  strings with those patterns removed, lower-cased, must be equal.

A test checks both against lm-eval's own filter and metric on the same strings, so the two cannot drift apart.
"""

from __future__ import annotations

import re

ANSWER_PATTERN = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORED = [re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$")]
INVALID = "[invalid]"


def extract_answer(text: str) -> str:
    """The number `flexible-extract` takes from a generation (its last match), or "[invalid]"."""
    matches = ANSWER_PATTERN.findall(text)
    if not matches:
        return INVALID
    return next((g for g in matches[-1] if g), INVALID).strip()


def normalise(answer: str) -> str:
    for pattern in IGNORED:
        answer = pattern.sub("", answer)
    return answer.lower()


def is_correct(text: str, reference: str) -> bool:
    """Whether the generation's extracted answer equals the reference under the task's exact-match rules."""
    return normalise(extract_answer(text)) == normalise(str(reference))
