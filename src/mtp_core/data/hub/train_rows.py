"""Rows of the training-data stand-ins (MetaMathQA, GSM8K, FineWeb-Edu, Magpie, AM-Thinking), made from the
synthetic word-problem generator (`mtp_core.data.synthetic`) so that every answer is known and every row has the
real dataset's columns and shape. `rng` is a seeded `random.Random` (one stream per dataset, config and split)."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator

from ..synthetic import (
    TYPE_ANSAUG,
    TYPE_FOBAR,
    TYPE_REPHRASED,
    TYPE_SEED,
    TYPE_SV,
    Example,
    Problem,
    augment,
    rephrasings,
    seed_problems,
    solution_steps,
)

# MetaMathQA's `type` = source + augmentation: GSM_AnsAug, MATH_Rephrased, ... (the seed row is an AnsAug row)
METAMATH_AUGMENTATION = {
    TYPE_SEED: "AnsAug",
    TYPE_ANSAUG: "AnsAug",
    TYPE_REPHRASED: "Rephrased",
    TYPE_SV: "SV",
    TYPE_FOBAR: "FOBAR",
}
AM_SYSTEM = (
    "You are a helpful assistant. To answer the user's question, you first think about the reasoning process and "
    "then provide the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
    "and <answer> </answer> tags, respectively."
)
FINEWEB_DUMP = "CC-MAIN-2024-10"


def uuid_of(text: str) -> str:
    """A UUID-shaped digest of `text` (ids that look like the real ones, stable across runs)."""
    d = hashlib.sha1(text.encode()).hexdigest()
    return f"{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def solution(problem: Problem) -> tuple[list[str], int]:
    """The canonical solution sentences and the answer."""
    lines, answer = solution_steps(problem)
    return lines, int(answer)


def examples(n: int, rng: random.Random) -> list[Example]:
    """`n` MetaMathQA-style rows of n // 5 + 2 seed problems (each: its seed row, then its augmentations), taken
    round-robin over the problems with the k-th problem starting at its k-th row, so that even a few rows span
    several problems and every augmentation type."""
    groups = [augment(p, {}, rng) for p in seed_problems(n // 5 + 2, rng)]
    mixed = [g[(j + k) % len(g)] for j in range(max(map(len, groups))) for k, g in enumerate(groups) if j < len(g)]
    return mixed[:n]


def metamathqa_rows(n: int, rng: random.Random) -> list[dict]:
    """MetaMathQA rows (query, response, type, original_question): seed problems alternate between the GSM_ and
    the MATH_ half; GSM responses end "#### N\\nThe answer is: N", MATH responses "The answer is: N" alone."""
    seeds: dict[str, str] = {}
    rows = []
    for ex in examples(n, rng):
        source = seeds.setdefault(ex.row["original_question"], ("GSM", "MATH")[len(seeds) % 2])
        response = ex.row["response"]
        if source == "MATH":
            response = "\n".join(line for line in response.split("\n") if not line.startswith("#### "))
        kind = f"{source}_{METAMATH_AUGMENTATION[ex.row['type']]}"
        rows.append(
            {
                "query": ex.row["query"],
                "response": response,
                "type": kind,
                "original_question": ex.row["original_question"],
            }
        )
    return rows


def gsm8k_rows(config: str, split: str, n: int, rng: random.Random) -> list[dict]:
    """GSM8K rows (question, answer): the solution sentences and a final "#### N" line; the `socratic` config puts
    a sub-question before each sentence ("... ? ** sentence"), as the real one does."""
    rows = []
    for problem in seed_problems(n, rng):
        lines, answer = solution(problem)
        if config == "socratic":
            lines = [f"What is the result of step {i}? ** {line}" for i, line in enumerate(lines, 1)]
        rows.append({"question": problem.question, "answer": "\n".join([*lines, f"#### {answer}"])})
    return rows


def _documents(rng: random.Random) -> Iterator[str]:
    """Endless short lesson texts: a word problem and its worked solution."""
    while True:
        for problem in seed_problems(8, rng):
            lines, answer = solution(problem)
            yield " ".join([problem.question, *lines, f"So the answer is {answer}."])


def fineweb_rows(n: int, rng: random.Random) -> list[dict]:
    """FineWeb-Edu rows with its columns: text, id, dump, url, file_path, language, language_score,
    token_count, score, int_score (an educational score of 3 or more, as in the edu subset)."""
    rows = []
    for i, text in enumerate(itertools.islice(_documents(rng), n)):
        score = round(rng.uniform(2.6, 4.9), 6)
        digest = uuid_of(text)
        rows.append(
            {
                "text": text,
                "id": f"<urn:uuid:{digest}>",
                "dump": FINEWEB_DUMP,
                "url": f"https://lessons.example.org/math/{digest[:8]}",
                "file_path": f"s3://commoncrawl/crawl-data/{FINEWEB_DUMP}/segments/0/warc/{FINEWEB_DUMP}-{i:05d}.warc.gz",
                "language": "en",
                "language_score": round(rng.uniform(0.9, 1.0), 6),
                "token_count": len(text.split()) * 4 // 3,
                "score": score,
                "int_score": round(score),
            }
        )
    return rows


def magpie_rows(hub_id: str, n: int, rng: random.Random) -> list[dict]:
    """Magpie rows: `conversations` [{from: human, value}, {from: gpt, value}], `instruction` and `response` (the
    same two texts), and the other columns of the Pro-300K-Filtered / Reasoning-150K cards (generation configs,
    task category, difficulty, quality, ...)."""
    rows = []
    for ex in examples(n, rng):
        instruction, response = ex.row["query"], ex.row["response"]
        row = {
            "uuid": uuid_of(f"{hub_id}/{instruction}"),
            "instruction": instruction,
            "response": response,
            "conversations": [{"from": "human", "value": instruction}, {"from": "gpt", "value": response}],
            "gen_input_configs": {"temperature": 1.0, "top_p": 1.0, "input_generator": "stand-in", "seed": None},
            "intent": "The user wants to solve a word problem.",
            "knowledge": "To solve this problem, the models need to know basic arithmetic.",
            "difficulty": rng.choice(["easy", "medium"]),
            "difficulty_generator": "stand-in",
            "input_quality": "good",
            "quality_explanation": "The query is clear and specific.",
            "quality_generator": "stand-in",
            "task_category": "Math",
            "other_task_category": ["Reasoning"],
            "task_category_generator": "stand-in",
            "language": "EN",
        }
        if hub_id.endswith("Reasoning-150K"):
            row["gen_input_configs"]["extract_input"] = "<|im_start|>user\n"
            row["gen_response_configs"] = {
                "prompt": instruction,
                "temperature": 0,
                "top_p": 1.0,
                "repetition_penalty": 1.0,
                "max_tokens": 4096,
                "stop_tokens": ["<|eot_id|>"],
                "output_generator": "stand-in",
            }
        else:
            row["model"] = "stand-in"
            row["gen_input_configs"]["pre_query_template"] = (
                "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            )
            row.update(
                llama_guard_2="safe",
                reward_model="stand-in",
                instruct_reward=round(rng.uniform(0.0, 5.0), 6),
                min_neighbor_distance=round(rng.uniform(0.1, 1.0), 6),
                repeat_count=0,
                min_similar_uuid=None,
                instruction_length=len(instruction),
                response_length=len(response),
            )
        rows.append(row)
    return rows


def _am_row(human: str, think: str, answer: str, category: str) -> dict:
    """One AM-Thinking row; every category's file has the same column types (`datasets` cannot cast a column that is
    null all through the first file to text in the next), so the human turn's reference answer is always text."""
    info = {"source": f"stand-in/{category}", "reference_answer": answer, "test_case": None}
    return {
        "system": AM_SYSTEM,
        "conversations": [
            {"from": "human", "value": human, "info": {**info, "think_content": None, "answer_content": None}},
            {
                "from": "assistant",
                "value": f"<think>\n{think}\n</think>\n<answer>\n{answer}\n</answer>",
                "info": {**info, "source": "am-thinking-v1", "think_content": think, "answer_content": answer},
            },
        ],
    }


def am_thinking_rows(category: str, n: int, rng: random.Random) -> list[dict]:
    """AM-Thinking-v1-Distilled rows: `system` and `conversations` [{from: human|assistant, value, info}], the
    assistant's value "<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>". Category `math`: a word problem;
    `chat`: "rephrase this word problem"."""
    rows = []
    for problem in seed_problems(n, rng):
        if category == "math":
            lines, answer = solution(problem)
            rows.append(_am_row(problem.question, "\n".join(lines), f"The answer is {answer}.", category))
        else:
            other = rephrasings(problem, 1, rng)[0].row["query"]
            think = "The numbers and the question stay the same; only the wording changes."
            rows.append(_am_row(f"Rephrase this word problem: {problem.question}", think, other, category))
    return rows
