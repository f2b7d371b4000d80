"""Cost of the fine-tune's (and paper 4's) micro-batch layout: rows right-padded to the longest (every position
through the model, logits from the first supervised column on) against the library's packing
(`mtp_core.train.sft.SFTBatches`: rows packed into sequences of at most `max_tokens`, logits only where the next
token is supervised). Both give the same loss (checked on every micro-batch).

Protocol (docs/development.md "Benchmarks"): one process, the same weights and micro-batches (8 rows of the math train
split, in the training's order), a fixed thread count, forward + backward only (what the layout changes), the two
layouts interleaved with the order alternating per micro-batch, the first pair dropped as warm-up, medians.

Usage: .venv/bin/python benchmarks/sft_packing.py [--results results] [--steps 13] [--rows 8] [--threads 2]
Needs the prepared base model and math split of an embedded run (`results/models/base/smollm2-135m`,
`results/data/math/train.jsonl`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mtp_core.data.rows import read_rows
from mtp_core.models.load import load_model
from mtp_core.train.loop import MicroBatchSpec
from mtp_core.train.losses import token_cross_entropy
from mtp_core.train.sft import IGNORE, SFTBatches, encode_rows, sft_loss
from mtp_core.train.sft_settings import SFTConfig


def padded(examples: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """The rows right-padded to the longest, with a 0/1 attention mask."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for r, (ids, start) in enumerate(examples):
        t = torch.as_tensor(ids)
        input_ids[r, : len(ids)], attention[r, : len(ids)], labels[r, start : len(ids)] = t, 1, t[start:]
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def padded_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    targets = batch["labels"][:, 1:]
    supervised = targets != IGNORE
    first = int(supervised.any(0).nonzero()[0])
    keep = torch.arange(first, targets.shape[1])
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False, logits_to_keep=keep
    ).logits
    ce = token_cross_entropy(logits, targets[:, first:].clamp(min=0))
    return ce[supervised[:, first:]].mean()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results")
    ap.add_argument("--steps", type=int, default=13)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = Path(args.results)
    spec = {"name": "smollm2-135m", "source": "gguf", "chat_template": True, "system_prompt": "none"}
    loaded = load_model(spec, base_dir=results / "models" / "base" / "smollm2-135m")
    model = loaded.model.train()
    cfg = SFTConfig(max_tokens=args.max_tokens)
    examples = encode_rows(read_rows(results / "data" / "math" / "train.jsonl"), loaded.tokenizer, cfg, "chat")
    packed = SFTBatches(examples, loaded.tokenizer.pad_token_id, cfg)
    seconds: dict[str, list[float]] = {"padded": [], "packed": []}
    positions = {"padded": 0, "packed": 0}
    load_before = os.getloadavg()[0]
    for step in range(args.steps):
        mb = MicroBatchSpec(step=step, chunk=0, start=step * args.rows, size=args.rows)
        rows = [examples[i] for i in packed.order.indices(mb.start, mb.size)]
        pair = [
            ("padded", padded(rows, loaded.tokenizer.pad_token_id), padded_loss),
            ("packed", packed.micro_batch(mb), lambda m, b: sft_loss(m, b)[0]),
        ]
        losses = {}
        for name, batch, loss_fn in pair if step % 2 == 0 else pair[::-1]:
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = loss_fn(model, batch)
            loss.backward()
            dt = time.perf_counter() - t0
            losses[name] = loss.item()
            positions[name] += batch["input_ids"].numel()
            if step:
                seconds[name].append(dt)
        if abs(losses["padded"] - losses["packed"]) > 1e-4:
            raise AssertionError(f"micro-batch {step}: the layouts disagree on the loss: {losses}")
    print(
        f"{args.steps - 1} micro-batches of {args.rows} rows after 1 warm-up, {args.threads} threads, load "
        f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print("| layout | positions per micro-batch | forward + backward, median s | sum s |")
    print("|---|---|---|---|")
    for name, s in seconds.items():
        print(f"| {name} | {positions[name] / args.steps:.0f} | {statistics.median(s):.2f} | {sum(s):.1f} |")


if __name__ == "__main__":
    main()
