"""CoQA (Reddy et al. 2019; paper 4 §4.1, 0-shot, thinking off): the prompt, gold answers and scores of the local
lm-eval task `coqa` (`coqa.yaml`), a re-implementation of lm-eval 0.4.13's built-in `coqa` (task version 3.0),
whose helpers import `transformers.data.metrics.squad_metrics`, a module transformers 5 no longer has.

Standard library only and no package-relative import: lm-eval loads this file by path from the folder the YAML is
materialised in (`!function coqa.doc_to_text`), outside the `mtp_core` package.

What the built-in does, and so do we:
- One document per story, asking its last question: the prompt is the story, a blank line, every earlier turn as
  "Q: <question>" and "A: <answer>" each followed by a blank line, then "Q: <last question>", a blank line and "A:".
- Gold answers: the last turn's answer, then each additional answer for that turn (validation: three more
  annotators, keys "0", "1", "2" in order) unless it equals a gold already kept, ignoring case.
- The prediction: the generation stripped of surrounding whitespace, up to its first line break.
- SQuAD's answer normalisation: lower case, drop `string.punctuation`, replace the words a / an / the by a space,
  collapse whitespace (in that order: "the-end" keeps its article). em: the normalised strings are equal. f1: the
  harmonic mean of precision and recall of the normalised tokens (counted with multiplicity); when either side has
  no token, 1 if neither has, else 0 (SQuAD's no-answer rule).
- Several golds: each gold is left out in turn, the prediction scores its best against the others, and the score
  is the mean of these maxima (the official CoQA script's averaging over human answers); one gold: its score.

Where the built-in is not defined we choose:
- An additional-answer list too short for the turn is skipped. The train split has only the loader's one-entry
  placeholders, where the built-in indexes past the end and fails; only few-shot examples (drawn from train) reach
  them, and those show just the first gold.
- The YAML's decontamination query names the `questions` field; the built-in's names `question`, which no
  document has (lm-eval 0.4.13 never renders it in an evaluation).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

PUNCTUATION = frozenset(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def doc_to_text(doc: Mapping) -> str:
    """The story and the conversation up to the last question, whose answer is left open ("A:")."""
    questions, answers = doc["questions"]["input_text"], doc["answers"]["input_text"]
    turns = [
        f"Q: {question}\n\nA: {answers[i]}\n\n" if i < len(answers) - 1 else f"Q: {question}\n\nA:"
        for i, question in enumerate(questions)
    ]
    return doc["story"] + "\n\n" + "".join(turns)


def doc_to_target(doc: Mapping) -> list[str]:
    """The gold answers of the last turn: the answer, then the additional answers not already kept (any case)."""
    turn = len(doc["questions"]["input_text"])  # 1-based number of the last turn
    golds = [doc["answers"]["input_text"][turn - 1]]
    for extra in (doc.get("additional_answers") or {}).values():
        texts = extra["input_text"]
        if len(texts) >= turn and texts[turn - 1].lower() not in {g.lower() for g in golds}:
            golds.append(texts[turn - 1])
    return golds


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    no_punctuation = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", no_punctuation).split())


def exact_match(gold: str, prediction: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(prediction))


def token_f1(gold: str, prediction: str) -> float:
    """Token-overlap F1 of the normalised answers; an empty side scores 1 against an empty side, else 0."""
    gold_tokens, predicted_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    shared = sum((Counter(gold_tokens) & Counter(predicted_tokens)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted_tokens), shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def over_golds(golds: Sequence[str], prediction: str, score: Callable[[str, str], float]) -> float:
    """`score` against several golds: the mean over left-out golds of the best score against the rest."""
    if len(golds) == 1:
        return score(golds[0], prediction)
    best = [max(score(g, prediction) for j, g in enumerate(golds) if j != left_out) for left_out in range(len(golds))]
    return sum(best) / len(golds)


def process_results(doc: Mapping, results: Sequence[str]) -> dict[str, float]:
    """em and f1 of the generation's first line against the document's gold answers."""
    prediction = results[0].strip().split("\n")[0]
    golds = doc_to_target(doc)
    return {"em": over_golds(golds, prediction, exact_match), "f1": over_golds(golds, prediction, token_f1)}
