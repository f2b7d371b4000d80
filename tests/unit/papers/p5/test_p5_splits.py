"""Paper 5's prompt splits: a GSM8K task's calibration and training prompts are GSM8K training questions (the
original questions of the dataset's GSM8K-derived rows, once each; never MATH rows, never rephrasings), its test
prompts the test split's; one pool cut into disjoint slices; the paper's prompt texts."""

from __future__ import annotations

import pytest

from mtp_core.io import InputError, atomic_write_jsonl
from mtp_core.papers.p5.splits import cut, humaneval_pool, math_pools, paper_format, split_task


def rows(*specs):
    return [{"query": q, "response": "r", "type": t, "original_question": o} for q, t, o in specs]


@pytest.fixture
def math_files(tmp_path):
    train = rows(
        ("Tom has 3 apples ...", "GSM_AnsAug", "Tom has 3 apples ..."),
        ("Tom owns three apples ...", "GSM_Rephrased", "Tom has 3 apples ..."),
        ("If Tom has x apples ... 5, what is x?", "GSM_SV", "Tom has 3 apples ..."),
        ("Find the integral ...", "MATH_AnsAug", "Find the integral ..."),
        ("A bus leaves at 9 ...", "GSM_FOBAR", "A bus leaves at 9 ..."),
    )
    validation = rows(
        ("Ann reads 10 pages ...", "SYN_Rephrased", "Ann reads ten pages ..."),
        ("Ann reads ten pages ...", "SYN_Seed", "Ann reads ten pages ..."),
        ("Compute 2^10 modulo 7.", "MATH_Rephrased", "What is 2^10 mod 7?"),
    )
    test = [{"query": "Jan sells 4 pies ...", "response": "... #### 8", "answer": "8", "type": "GSM8K"}]
    files = {}
    for name, data in (("train", train), ("validation", validation), ("test", test)):
        files[name] = str(tmp_path / f"{name}.jsonl")
        atomic_write_jsonl(files[name], data)
    return files


def test_math_calibration_prompts_are_gsm8k_training_questions(math_files):
    pools = math_pools("gsm8k", math_files, "error", {})
    text = {s: [r["prompt"] for r in p] for s, p in pools.items()}
    assert text["train"] == ["Tom has 3 apples ...", "A bus leaves at 9 ..."]  # originals, once; no MATH row
    assert text["calib"] == ["Ann reads ten pages ..."]  # the synthetic stand-in's seed question
    assert text["test"] == ["Jan sells 4 pies ..."]
    assert pools["test"][0]["answer"] == "8" and pools["calib"][0]["id"] == "gsm8k/calib/0"


def test_split_task_sizes_and_paper_format(math_files):
    spec = {"source": "math", "dataset": "math", "test": 1, "calib": 1, "train": 2}
    out, report = split_task("gsm8k", spec, 123, math_files=math_files, prompt_format="paper")
    assert report["sizes"] == {"test": 1, "calib": 1, "train": 2} and report["pools"] == {
        "test": 1,
        "calib": 1,
        "train": 2,
    }
    p = out["calib"][0]["prompt"]
    assert p.startswith("A chat between a curious user") and p.endswith("Ann reads ten pages ...\nASSISTANT:")
    assert "Solve this grade school math problem." in p
    with pytest.raises(InputError, match=r"papers\.p5\.tasks\.gsm8k\.train: 3 prompts asked, the pool has 2"):
        split_task("gsm8k", {**spec, "train": 3}, 123, math_files=math_files)
    code = paper_format({"prompt": "x", "stub": "def f():"}, "humaneval")
    assert code["prompt"] == "USER: Complete this Python function:\n\ndef f():\nASSISTANT:"


def test_one_pool_is_cut_into_disjoint_slices():
    pool = [{"id": str(i)} for i in range(10)]
    out = cut(pool, {"test": 3, "calib": 4, "train": 2}, "seed", "t")
    ids = [r["id"] for s in ("test", "calib", "train") for r in out[s]]
    assert len(ids) == len(set(ids)) == 9 and cut(pool, {"test": 3, "calib": 4, "train": 2}, "seed", "t") == out
    with pytest.raises(InputError, match="the splits would overlap"):
        cut(pool, {"test": 5, "calib": 5, "train": 1}, "seed", "t")


def test_a_question_in_two_splits_is_refused(math_files, tmp_path):
    """The splits are compared by text, not by id (ids name their split, so they never collide): a test question
    that is also a GSM8K training question of the validation split stops the job."""
    test = [{"query": "Ann reads ten pages ...", "response": "... #### 8", "answer": "8", "type": "GSM8K"}]
    atomic_write_jsonl(tmp_path / "leaky_test.jsonl", test)
    spec = {"source": "math", "dataset": "math", "test": 1, "calib": 1, "train": 2}
    with pytest.raises(InputError, match=r"papers\.p5\.tasks\.gsm8k: prompts \['gsm8k/test/0'\] fall in two splits"):
        split_task("gsm8k", spec, 123, math_files={**math_files, "test": str(tmp_path / "leaky_test.jsonl")})


def test_the_leaderboards_prompts_are_held_out_of_every_split(tmp_path):
    """The embedded config: paper 5 has leaderboard rows, so its split job reads the prompt files the leaderboard
    decodes, and no HumanEval split keeps their prompts (the Spec-Bench-style set draws its coding prompts from the
    same 164 problems); the prompts left out are counted."""
    from mtp_core.data import prepare_math
    from mtp_core.data.prompt_sets import build_prompt_set
    from mtp_core.papers.p5.plan import P5Plan
    from mtp_core.validation import load_config
    from tests.conftest import REPO

    cfg = load_config(REPO / "config.yaml")
    inputs = P5Plan(cfg).split_inputs()
    assert {k for k in inputs if k.startswith("held_out_")} == {
        f"held_out_{ps}" for ps in cfg["leaderboard"]["prompt_sets"]
    }
    specbench = cfg["prompt_sets"]["specbench"]
    prepare_math(cfg["datasets"][specbench["dataset"]], tmp_path, cfg["seed"])  # its math prompts' test split
    rows, _ = build_prompt_set("specbench", specbench, seed=cfg["seed"], math_test=tmp_path / "test.jsonl")
    held = {str(r["prompt"]) for r in rows}
    spec, seed = cfg["papers"]["p5"]["tasks"]["humaneval"], cfg["papers"]["p5"]["split_seed"]
    texts = lambda out: {str(r["prompt"]) for split in out.values() for r in split}  # noqa: E731
    before, _ = split_task("humaneval", spec, seed)
    after, report = split_task("humaneval", spec, seed, held_out=held)
    assert texts(before) & held and not texts(after) & held  # the old split trained on a leaderboard prompt
    assert report["held_out"] == len(held & {str(r["prompt"]) for r in humaneval_pool("error", {})})
