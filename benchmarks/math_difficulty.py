"""Choose the synthetic math difficulty on the VALIDATION split (issue "an accuracy that can move").

For each candidate `difficulty` of the `math` dataset: build the split and the fine-tuned starting model
(`smollm2-135m-math`, the config's recipe) with Snakemake in a work directory of its own, then score the model
with the `synthetic_math_cot` task (the evaluation's own prompt, decoder and settings) on the validation split's
seed and rephrased questions (their answers read from "The answer is: N"). Prints accuracy ± stderr per candidate; the test
split is never read.

    .venv/bin/python benchmarks/math_difficulty.py --work /tmp/diff \
        --candidate '{"max_steps": 2, "max_value": 100}' --candidate '{"max_steps": 3, "max_value": 60}'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ANSWER = re.compile(r"The answer is: (-?[0-9.,]+)\s*$")
MODEL = "smollm2-135m-math"


def build(work: Path, difficulty: dict, cores: int) -> dict:
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["datasets"]["math"]["difficulty"] = difficulty
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    target = f"results/models/finetuned/{MODEL}/model"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work)]
    cmd += ["--configfile", str(work / "config.yaml"), "--cores", str(cores), target, "results/data/math/test.jsonl"]
    subprocess.run(cmd, check=True, env=env)
    return cfg


def validation_questions(work: Path, n: int) -> Path:
    """Seed and rephrased questions of the validation split (the test split's question styles) with their answers,
    in the test split's row format."""
    out = work / "validation_seed.jsonl"
    rows = []
    for line in (work / "results/data/math/validation.jsonl").read_text().splitlines():
        row = json.loads(line)
        m = ANSWER.search(row["response"])
        if row["type"] in ("SYN_Seed", "SYN_Rephrased") and m:
            rows.append({**row, "answer": m.group(1)})
    out.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
    return out


def score(work: Path, cfg: dict, data: Path, threads: int) -> tuple[float, float, int]:
    import torch

    from mtp_core.config import model_spec
    from mtp_core.evaluate import EvalSettings, run_evaluation
    from mtp_core.models import load_model

    torch.set_num_threads(threads)
    cfg = {**cfg, "scale": "embedded"}
    loaded = load_model(
        model_spec(cfg, MODEL), base_dir=None, checkpoint=str(work / f"results/models/finetuned/{MODEL}/model")
    )
    settings = EvalSettings.from_config(cfg, limit=None, apply_chat_template=None)
    res = run_evaluation(
        cfg, loaded, "greedy", "synthetic_math_cot", work / "validation.json", data_path=data, settings=settings
    )
    acc = res["metrics"]["exact_match,flexible-extract"]["value"]
    n = res["n"]
    return acc, math.sqrt(acc * (1 - acc) / max(1, n - 1)), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="a directory per candidate is made under it")
    ap.add_argument("--candidate", action="append", required=True, help="a difficulty as JSON")
    ap.add_argument("--n", type=int, default=64, help="validation seed questions scored")
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    for i, spec in enumerate(args.candidate):
        difficulty = json.loads(spec)
        work = Path(args.work) / f"c{i}"
        cfg = build(work, difficulty, args.cores)
        acc, se, n = score(work, cfg, validation_questions(work, args.n), args.cores)
        print(json.dumps({"difficulty": difficulty, "accuracy": acc, "stderr": se, "n": n}), flush=True)


if __name__ == "__main__":
    main()
