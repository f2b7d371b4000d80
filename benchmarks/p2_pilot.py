"""Paper 2's pilot: the data, learning rate and step count of the embedded heads,
chosen on held-out validation windows, never on the test prompts the tables report.

For each training dataset (`--datasets`: `pretrain` = packaged ShareGPT text, `pretrain_math` = the math train
split rendered as the fine-tuned model saw it), each loss (`--betas`: 0 = MTP, > 0 = MTP-D) and learning rate
(`--lrs`), K = 1 heads train on the frozen trunk through the pipeline's own training (`train_p2`, features cached
once per dataset) with an export every `--every` steps; every export is then scored on validation windows of both
domains: the tail of the ShareGPT stream (held out by `val_tokens`) and the math dataset's validation split
(seed-grouped: no augmentation of a training problem), rendered like the training rows. Per export: agree@1 (head
1's argmax = the main head's argmax on the same target: the teacher-forced acceptance proxy), CE@1 and KL@1, mean
and standard error over windows.

    python benchmarks/p2_pilot.py --model smollm2-135m-math --out results/analysis/p2/pilot.json
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from mtp_core.config.settings import model_spec
from mtp_core.data.pretrain import prepare_shards
from mtp_core.data.shards import TokenShards
from mtp_core.io import atomic_write_json
from mtp_core.models.heads import load_heads
from mtp_core.models.load import load_model
from mtp_core.models.plan import model_dir
from mtp_core.papers.p2.data import Windows, trunk_features, write_features
from mtp_core.papers.p2.losses import p2_loss
from mtp_core.papers.p2.settings import P2LossConfig
from mtp_core.papers.p2.train import train_p2
from mtp_core.train.config import step_dir_name
from mtp_core.validation import load_config

log = logging.getLogger("p2_pilot")


def val_windows(config: dict, loaded, seq_len: int, n: int, work: Path) -> dict[str, np.ndarray]:
    """[n, seq_len] held-out windows of each domain (module docstring)."""
    share = Windows(TokenShards("results/data/pretrain/shards/index.json"), seq_len, 100_000)
    spec = {"source": "rows", "dataset": "math", "split": "validation", "max_tokens": 10**7, "shard_tokens": 10**7}
    prepare_shards(
        spec,
        loaded.tokenizer,
        work / "math_val",
        tokenizer_name=loaded.name,
        seed=0,
        rows="results/data/math/validation.jsonl",
        template="chat" if loaded.chat_template else "plain",
    )
    stream = TokenShards(work / "math_val" / "index.json")
    k = min(n, len(stream) // seq_len)
    math = np.stack([stream.read(i * seq_len, seq_len) for i in range(k)])
    return {"sharegpt": share.val_rows(n), "math": math}


@torch.inference_mode()
def score(loaded, heads, windows: np.ndarray, h0: torch.Tensor, batch: int = 8) -> dict[str, list[float]]:
    """agree@1, ce@1, kl@1 per window."""
    out: dict[str, list[float]] = {"agree@1": [], "ce@1": [], "kl@1": []}
    cfg = P2LossConfig(topn=10000)
    for i in range(0, len(windows), batch):
        ids = torch.from_numpy(windows[i : i + batch])
        h = h0[i : i + batch]
        main = loaded.model.lm_head(h)
        logits = [loaded.model.lm_head(x) for x in heads.forward_train(loaded.model, h, ids)]
        for j in range(ids.shape[0]):
            m = p2_loss(main[j : j + 1], [x[j : j + 1] for x in logits], ids[j : j + 1], cfg).metrics
            for key in out:
                out[key].append(float(m[key]))
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "stderr": statistics.stdev(values) / len(values) ** 0.5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--model", default="smollm2-135m-math")
    ap.add_argument("--datasets", nargs="+", default=["pretrain", "pretrain_math"])
    ap.add_argument("--betas", nargs="+", type=float, default=[0.0, 1.0])
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-3])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--val-windows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="results/analysis/p2/pilot")
    ap.add_argument("--out", default="results/analysis/p2/pilot.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    spec = model_spec(config, args.model)
    work = Path(args.work)
    loaded = load_model(spec, base_dir=model_dir(config, args.model))
    n_layers = loaded.model.config.num_hidden_layers
    val = val_windows(config, loaded, args.seq_len, args.val_windows, work)
    val_h0 = {d: trunk_features(loaded.model, torch.from_numpy(w), n_layers) for d, w in val.items()}
    rows = args.steps * args.batch
    results = []
    for dataset in args.datasets:
        shards = f"results/data/{dataset}/shards/index.json"
        windows = Windows(TokenShards(shards), args.seq_len, 100_000)
        feats = work / f"features-{dataset}"
        if not (feats / "index.json").exists():
            t0 = time.perf_counter()
            write_features(loaded.model, windows, rows, n_layers, feats)
            log.info("features of %s: %.0f s", dataset, time.perf_counter() - t0)
        for beta in args.betas:
            for lr in args.lrs:
                run = work / f"{dataset}-beta{beta:g}-lr{lr:g}"
                train = {
                    "max_steps": args.steps,
                    "global_batch_size": args.batch,
                    "micro_batch_size": args.batch,
                    "lr": lr,
                    "warmup_steps": 4,
                    "schedule": "wsd",
                    "checkpoint_every": 0,
                    "save_steps": list(range(args.every, args.steps + 1, args.every)),
                    "progress": False,
                    "threads": args.threads,
                }
                method = {"seq_len": args.seq_len, "num_heads": 1, "loss": {"beta": beta}}
                t0 = time.perf_counter()
                done = train_p2(loaded, shards, method, train, run, features=feats)
                secs = time.perf_counter() - t0
                for step in train["save_steps"]:
                    heads = load_heads(run / "exports" / step_dir_name(step), loaded.model)
                    row = {"dataset": dataset, "beta": beta, "lr": lr, "step": step, "train_s": secs}
                    for domain, w in val.items():
                        for key, vals in score(loaded, heads, w, val_h0[domain]).items():
                            row[f"{domain} {key}"] = summary(vals)
                    results.append(row)
                    log.info("%s", {k: (v["mean"] if isinstance(v, dict) else v) for k, v in row.items()})
                atomic_write_json(args.out, {"args": vars(args), "results": results, "last_row": done.last_row})


if __name__ == "__main__":
    main()
