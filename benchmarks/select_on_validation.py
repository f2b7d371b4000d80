"""Choose settings on the VALIDATION split of the math set, never on the test split the tables report.

One candidate = the embedded config (`config.yaml`) with some keys set. Snakemake builds the candidate's targets in
a work directory of its own (optionally starting from another candidate's results, e.g. a shared fine-tuned model,
copied in), then each decoder scores the candidate's weights with the `synthetic_math_cot` task (the evaluation's
own prompt and settings) on the validation split's seed and rephrased questions, whose answers are read from
"The answer is: N". Prints one JSON line per (candidate, decoder): accuracy ± stderr, n, effective k.

    # the synthetic difficulty: the fine-tuned starting model's accuracy
    .venv/bin/python benchmarks/select_on_validation.py --work /tmp/sel/d2 \\
        --set 'datasets.math.difficulty={"max_steps": 2, "max_value": 100}' \\
        --build results/models/finetuned/smollm2-135m-math/model \\
        --weights results/models/finetuned/smollm2-135m-math/model --decoder greedy
    # paper 1's learning rate, from that fine-tuned model
    .venv/bin/python benchmarks/select_on_validation.py --work /tmp/sel/lr1e-4 --reuse /tmp/sel/d2 \\
        --set 'datasets.math.difficulty={"max_steps": 2, "max_value": 100}' --set papers.p1.train.lr=1.0e-4 \\
        --build results/models/p1/main/model --weights results/models/p1/main/model \\
        --decoder 'static-k1={"decoder": "static-k", "k": 1}' \\
        --decoder 'conf-adapt-tau0.9={"decoder": "conf-adapt", "tau": 0.9, "k_max": 4}'
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ANSWER = re.compile(r"The answer is: (-?[0-9.,]+)\s*$")
REUSED = ("results/models", "results/data")


def set_key(cfg: dict, dotted: str, value: object) -> None:
    *path, last = dotted.split(".")
    node = cfg
    for key in path:
        node = node.setdefault(key, {})
    node[last] = value


def candidate_config(sets: list[str], threads: int) -> dict:
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    for item in sets:
        key, _, raw = item.partition("=")
        set_key(cfg, key, yaml.safe_load(raw))
    cfg["threads"] = threads  # torch threads of the rules and, through the launcher, of the trainings
    cfg["launcher"] = {**(cfg.get("launcher") or {}), "threads": threads}
    return cfg


def build(work: Path, cfg: dict, targets: list[str], reuse: Path | None, cores: int) -> None:
    work.mkdir(parents=True, exist_ok=True)
    if reuse is not None:
        for sub in REUSED:
            if (reuse / sub).is_dir() and not (work / sub).exists():
                shutil.copytree(reuse / sub, work / sub, symlinks=True)
    (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work)]
    cmd += ["--configfile", str(work / "config.yaml"), "--cores", str(cores), "--rerun-triggers", "mtime"]
    subprocess.run([*cmd, "--", *targets, "results/data/math/validation.jsonl"], check=True, env=env)


def validation_questions(work: Path, n: int | None) -> Path:
    """Seed and rephrased questions of the validation split (the test split's question styles) with their
    answers, in the test split's row format."""
    out = work / "validation_questions.jsonl"
    rows = []
    for line in (work / "results/data/math/validation.jsonl").read_text().splitlines():
        row = json.loads(line)
        m = ANSWER.search(row["response"])
        if row["type"] in ("SYN_Seed", "SYN_Rephrased") and m:
            rows.append({**row, "answer": m.group(1)})
    out.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
    return out


def score(work: Path, cfg: dict, weights: str, decoders: dict[str, dict], n: int | None, threads: int):
    import torch

    from mtp_core.evaluate import EvalSettings, run_evaluation
    from mtp_core.models.load import load_model
    from mtp_core.validation import validate_config

    torch.set_num_threads(threads)
    cfg = validate_config(cfg)
    model = cfg["papers"]["p1"]["model"]
    loaded = load_model({**cfg["models"][model], "name": model}, checkpoint=str(work / weights))
    data = validation_questions(work, n)
    settings = EvalSettings.from_config(cfg, limit=None)
    for label, params in decoders.items():
        params = dict(params)
        name = params.pop("decoder", label)
        res = run_evaluation(
            cfg,
            loaded,
            name,
            "synthetic_math_cot",
            work / f"validation-{label}.json",
            decoder_params=params,
            data_path=data,
            settings=settings,
        )
        acc, count = res["metrics"]["exact_match,flexible-extract"]["value"], res["n"]
        yield {
            "decoder": label,
            "accuracy": acc,
            "stderr": math.sqrt(acc * (1 - acc) / max(1, count - 1)),
            "n": count,
            "effective_k": (res["decode_stats"].get("effective_k") or {}).get("mean"),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path, help="the candidate's work directory")
    ap.add_argument("--set", action="append", default=[], help="KEY.PATH=YAML value over config.yaml")
    ap.add_argument("--reuse", type=Path, help="copy results/models and results/data from this work directory")
    ap.add_argument("--build", action="append", default=[], help="Snakemake targets to build first")
    ap.add_argument("--weights", required=True, help="the checkpoint scored (relative to --work)")
    ap.add_argument("--decoder", action="append", required=True, help="LABEL or LABEL=JSON parameters")
    ap.add_argument("--n", type=int, default=None, help="at most this many validation questions")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (1 on a shared machine)")
    args = ap.parse_args()
    cfg = candidate_config(args.set, args.threads)
    build(args.work, cfg, args.build, args.reuse, args.cores)
    decoders = {}
    for item in args.decoder:
        label, _, raw = item.partition("=")
        decoders[label] = json.loads(raw) if raw else {}
    for row in score(args.work, cfg, args.weights, decoders, args.n, args.threads):
        print(json.dumps({"work": str(args.work), "set": args.set, **row}), flush=True)


if __name__ == "__main__":
    main()
