"""Rows of the evaluation-data stand-ins that lm-eval's tasks read (AIME25, GPQA, IFEval, CNN/DailyMail, ARC,
WinoGrande, CoQA), with the real datasets' columns and answer formats and a known right answer, made from the
synthetic word problems (`mtp_core.data.synthetic`). BBH is in `bbh_rows`. `rng` is a seeded `random.Random`."""

from __future__ import annotations

import hashlib
import random

from ..synthetic import PEOPLE, seed_problems
from .train_rows import solution


def _distractors(answer: int, k: int, rng: random.Random) -> list[int]:
    """`k` distinct positive integers other than `answer`, near it."""
    pool = [answer + d for d in range(-6, 7) if d and answer + d > 0]
    return rng.sample(pool, k)


def aime_rows(n: int, rng: random.Random) -> list[dict]:
    """AIME25 rows (problem, answer as a string, id)."""
    return [
        {"problem": p.question, "answer": str(solution(p)[1]), "id": str(i)}
        for i, p in enumerate(seed_problems(n, rng))
    ]


def gpqa_rows(n: int, rng: random.Random) -> list[dict]:
    """GPQA rows: the question, its correct and three incorrect answers (worded, so that a CSV reader keeps them
    as text), the explanation, and the card's other columns (pre-revision copies, domain, record id)."""
    rows = []
    for p in seed_problems(n, rng):
        lines, answer = solution(p)
        correct, *wrong = (f"exactly {v}" for v in [answer, *_distractors(answer, 3, rng)])
        explanation = " ".join(lines)
        record = hashlib.sha1(p.question.encode()).hexdigest()[:17]
        row = {"Pre-Revision Question": p.question, "Pre-Revision Correct Answer": correct}
        row.update({f"Pre-Revision Incorrect Answer {i}": w for i, w in enumerate(wrong, 1)})
        row.update({"Pre-Revision Explanation": explanation, "Self-reported question-writing time (minutes)": 10.0})
        row.update({"Question": p.question, "Correct Answer": correct})
        row.update({f"Incorrect Answer {i}": w for i, w in enumerate(wrong, 1)})
        row.update(
            {
                "Explanation": explanation,
                "Subdomain": "Physics (general)",
                "Writer's Difficulty Estimate": "Easy undergraduate level",
                "Record ID": f"rec{record}",
                "High-level domain": "Physics",
            }
        )
        rows.append(row)
    return rows


# IFEval instructions whose checks need no download: none splits sentences or tokenises words with NLTK's punkt
# data (length_constraints:number_sentences, change_case:capital_word_frequency) and none detects the language
# (langdetect's answers on short texts are random); each entry: (instruction id, its kwargs, the prompt's sentence)
IFEVAL_INSTRUCTIONS = (
    ("detectable_format:title", {}, "Give your answer a title wrapped in double angular brackets, such as <<title>>."),
    ("keywords:existence", {"keywords": ["plan", "total"]}, "Include the keywords plan and total."),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Use at least 2 placeholders in square brackets, such as [name].",
    ),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "Highlight at least 2 sections with markdown, i.e. *highlighted section*.",
    ),
    ("punctuation:no_comma", {}, "Do not use any commas in your response."),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "The letter z should appear at least 2 times.",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 12, "relation": "at least"},
        "Answer with at least 12 words.",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "At the end of your response, please explicitly add a postscript starting with P.S.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Is there anything else I can help with?"},
        "Finish your response with this exact phrase: Is there anything else I can help with?",
    ),
)


def ifeval_rows(n: int, rng: random.Random) -> list[dict]:
    """IFEval rows (key, prompt, instruction_id_list, kwargs): a writing request and two or three instructions
    from `IFEVAL_INSTRUCTIONS` (postscript and end phrase stay last, in that order), each stated in the prompt."""
    rows = []
    for i, p in enumerate(seed_problems(n, rng)):
        chosen = sorted(rng.sample(range(len(IFEVAL_INSTRUCTIONS)), rng.choice((2, 3))))
        ids, kwargs, asks = zip(*(IFEVAL_INSTRUCTIONS[j] for j in chosen))
        prompt = " ".join([f"Write a short note for {p.person[0]} about this problem: {p.question}", *asks])
        rows.append({"key": 1000 + i, "prompt": prompt, "instruction_id_list": list(ids), "kwargs": list(kwargs)})
    return rows


def cnn_dailymail_rows(n: int, rng: random.Random) -> list[dict]:
    """CNN/DailyMail rows (article, highlights, id): an article of three worked problems, its highlights the three
    questions (one per line), the id a 40-digit hex digest."""
    rows = []
    for _ in range(n):
        story = seed_problems(3, rng)
        article = " ".join(" ".join([p.question, *solution(p)[0]]) for p in story)
        highlights = "\n".join(p.question for p in story)
        rows.append(
            {
                "article": f"(CNN) -- {article}",
                "highlights": highlights,
                "id": hashlib.sha1(article.encode()).hexdigest(),
            }
        )
    return rows


def arc_rows(n: int, rng: random.Random) -> list[dict]:
    """ARC rows (id, question, choices {text, label}, answerKey): four numeric options, lettered A-D, or 1-4 in
    about one row in five (the real sets have a few numeric labels)."""
    rows = []
    for p in seed_problems(n, rng):
        answer = solution(p)[1]
        options = [answer, *_distractors(answer, 3, rng)]
        rng.shuffle(options)
        labels = list("1234") if rng.random() < 0.2 else list("ABCD")
        key = labels[options.index(answer)]
        rows.append(
            {
                "id": f"Mercury_{hashlib.sha1(p.question.encode()).hexdigest()[:7].upper()}",
                "question": p.question,
                "choices": {"text": [str(o) for o in options], "label": labels},
                "answerKey": key,
            }
        )
    return rows


# WinoGrande sentences: (sentence with `_` for the blank, "1" if the blank is option1 = {a}, else "2")
WINOGRANDE_SENTENCES = (
    ("{a} lent {b} a pencil because _ had forgotten to bring one.", "2"),
    ("{a} thanked {b} warmly because _ had helped carry the boxes.", "2"),
    ("{a} apologised to {b} because _ had been rude at lunch.", "1"),
    ("{a} asked {b} for directions because _ was new in town.", "1"),
    ("{a} won the race against {b} because _ had trained every day.", "1"),
    ("{a} waited an hour for {b} because _ had missed the bus.", "2"),
)


def winogrande_rows(split: str, n: int, rng: random.Random) -> list[dict]:
    """WinoGrande rows (sentence, option1, option2, answer "1" | "2"; "" in the test split, whose labels are
    hidden)."""
    rows = []
    for _ in range(n):
        sentence, answer = rng.choice(WINOGRANDE_SENTENCES)
        (a, _), (b, _) = rng.sample(PEOPLE, 2)
        rows.append(
            {
                "sentence": sentence.format(a=a, b=b),
                "option1": a,
                "option2": b,
                "answer": "" if split == "test" else answer,
            }
        )
    return rows


def _spans(story: str, texts: list[str], answers: list[str]) -> dict:
    """CoQA answer columns: each answer's rationale span (its sentence) in the story, and its free-form text."""
    starts = [story.index(t) for t in texts]
    return {
        "span_start": starts,
        "span_end": [s + len(t) for s, t in zip(starts, texts)],
        "span_text": texts,
        "input_text": answers,
        "turn_id": list(range(1, len(texts) + 1)),
    }


def coqa_rows(split: str, n: int, rng: random.Random) -> list[dict]:
    """CoQA rows (source, story, questions {input_text, turn_id}, answers {span_start, span_end, span_text,
    input_text, turn_id}, additional_answers {"0", "1", "2"}): the story is a worked problem, turn k asks for the
    result of its k-th step. The validation split's additional answers repeat the answers (lower-cased, the way
    annotators agree); the train split has the loader's empty placeholders (one turn, id -1)."""
    rows = []
    for p in seed_problems(n, rng):
        lines, _ = solution(p)
        story = " ".join([p.question, *lines])
        answers = [line.rstrip(".").split(" = ")[-1] for line in lines]
        spans = _spans(story, lines, answers)
        questions = {
            "input_text": [f"What does step {k} come to?" for k in spans["turn_id"]],
            "turn_id": spans["turn_id"],
        }
        if split == "validation":
            extra = {**spans, "input_text": [a.lower() for a in answers]}
        else:
            extra = {"span_start": [-1], "span_end": [-1], "span_text": [""], "input_text": [""], "turn_id": [-1]}
        rows.append(
            {
                "source": "mctest",
                "story": story,
                "questions": questions,
                "answers": spans,
                "additional_answers": {key: extra for key in ("0", "1", "2")},
            }
        )
    return rows
