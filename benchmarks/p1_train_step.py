"""Cost of one paper-1 training step relative to a plain next-token fine-tuning step on the same batch.

Target (issue item 3): a P1 step (student forward + backward on the blocked batch with logits only at the
supervised slots, plus the frozen teacher's student-forced forward) costs <= 1.6x a plain NTP fine-tuning
step (full-sequence cross-entropy) on the same rows. Protocol (docs/development.md "Benchmarks"): one process, the
same weights and rows, a fixed thread count, warm-up, interleaved order rotated per repeat, medians.

Steps timed (each = zero_grad, loss, backward, clip 1.0, AdamW step with lr 0 so the weights stay fixed):
  ntp          plain causal forward over B x S tokens, logits at every position, CE to the next token;
  p1-k16       P1 hard-teacher step at k = 16, offset 0 (the most supervised slots: M*k = 80 of 160 per row);
  p1-k9        P1 step at k = 9, offset -7 (the mean k of the paper's k ~ U[2, 16]);
  p1-gt-k16    P1 with ground-truth supervision (no teacher pass): isolates the teacher's share.
With --fwd-bwd also forward+backward only (no optimiser), the part the loss changes.

Usage: .venv/bin/python benchmarks/p1_train_step.py [--threads 1] [--repeats 5] [--batch 4] [--seq-len 160]
Uses SmolLM2-135M from results/models/base/smollm2-135m when prepared, else a tiny random model (and says so).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mtp_core.data.rows import read_rows  # noqa: E402
from mtp_core.io import atomic_write_json  # noqa: E402
from mtp_core.papers.p1.losses import ntp_loss, p1_loss  # noqa: E402
from mtp_core.papers.p1.mask_token import add_mask_token  # noqa: E402
from mtp_core.papers.p1.masks import build_blocked_batch  # noqa: E402
from mtp_core.papers.p1.settings import P1Config, P1LossConfig  # noqa: E402
from mtp_core.papers.p1.train import encode_examples, max_row_tokens  # noqa: E402
from mtp_core.results.page import machine  # noqa: E402

TINY = {
    "source": "tiny",
    "arch": "llama",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "init_seed": 0,
}


def load(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = REPO / "results" / "models" / "base" / "smollm2-135m"
    if base.exists() and not args.tiny:
        tok = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        return model, tok, "smollm2-135m", True
    from mtp_core.models.load import tiny_model, tiny_tokenizer

    print("NOTE: results/models/base/smollm2-135m not prepared (or --tiny): timing a TINY random model")
    return tiny_model(TINY), tiny_tokenizer(), "tiny-llama", True


def rows_for(args, n):
    path = REPO / "results" / "data" / "math" / "train.jsonl"
    if path.exists():
        return read_rows(path)[:n]
    return [
        {
            "query": f"What is {i} plus {i + 3}? Explain step by step.",
            "response": f"We add {i} and {i + 3}. " * 12 + f"The answer is: {2 * i + 3}",
        }
        for i in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=160)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (CPU) for every step")
    ap.add_argument("--tiny", action="store_true", help="force the tiny random model")
    ap.add_argument("--fwd-bwd", action="store_true", help="also time forward+backward without the optimiser")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "p1_train_step.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model, tok, name, chat = load(args)
    mask_id = add_mask_token(model, tok, seed=0)
    teacher = copy.deepcopy(model).eval().requires_grad_(False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, betas=(0.9, 0.95), weight_decay=0.1)

    p1 = P1Config(seq_len=args.seq_len)
    rows = rows_for(args, args.batch)
    enc = encode_examples(rows, tok, "chat" if chat else "plain", max_row_tokens(p1))
    tokens, lengths = enc.tokens, enc.lengths
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def blocked(k, offset):
        return build_blocked_batch(
            tokens,
            lengths=lengths,
            k=k,
            offset=offset,
            num_regions=p1.num_regions,
            seq_len=p1.seq_len,
            mask_id=mask_id,
            pad_id=pad,
        )

    b16, b9 = blocked(16, 0), blocked(9, -7)
    ntp_ids = tokens[:, : args.seq_len].clone()
    ntp_len = torch.clamp(lengths, max=args.seq_len)
    hard, gt = P1LossConfig(), P1LossConfig(objective="gt")
    ac = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else None

    def run(loss_fn, optimise=True):
        def go():
            opt.zero_grad(set_to_none=True)
            if ac:
                with ac():
                    loss = loss_fn()
            else:
                loss = loss_fn()
            loss.backward()
            if optimise:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()

        return go

    steps = {
        "ntp": run(lambda: ntp_loss(model, ntp_ids, ntp_len)),
        "p1-k16": run(lambda: p1_loss(model, teacher, b16, hard).loss),
        "p1-k9": run(lambda: p1_loss(model, teacher, b9, hard).loss),
        "p1-gt-k16": run(lambda: p1_loss(model, None, b16, gt).loss),
    }
    if args.fwd_bwd:
        steps["ntp/fwd+bwd"] = run(lambda: ntp_loss(model, ntp_ids, ntp_len), optimise=False)
        steps["p1-k16/fwd+bwd"] = run(lambda: p1_loss(model, teacher, b16, hard).loss, optimise=False)
    names = list(steps)
    print(
        f"model {name}, batch {args.batch} x {args.seq_len} tokens, {args.threads} thread(s), "
        f"{'bf16 autocast' if args.bf16 else 'fp32'}; P1: M={p1.num_regions}, supervised slots k=16: "
        f"{int(b16.supervised.sum()) * 16}, k=9: {int(b9.supervised.sum()) * 9} (of {args.batch * args.seq_len})"
    )
    for _ in range(args.warmup):
        for n in names:
            steps[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    t_all = time.perf_counter()
    for r in range(args.repeats):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotated, so drifts hit every step alike
        for n in order:
            t0 = time.perf_counter()
            steps[n]()
            times[n].append(time.perf_counter() - t0)
        print(f"  repeat {r + 1}/{args.repeats}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in names), flush=True)
    med = {n: statistics.median(v) for n, v in times.items()}
    ratio = {n: med[n] / med["ntp"] for n in ("p1-k16", "p1-k9", "p1-gt-k16")}
    if args.fwd_bwd:
        ratio["p1-k16/fwd+bwd"] = med["p1-k16/fwd+bwd"] / med["ntp/fwd+bwd"]
    print("\nmedian seconds per step:")
    for n in names:
        print(f"  {n:16s} {med[n]:.3f}  (min {min(times[n]):.3f}, max {max(times[n]):.3f})")
    print("ratios to the plain NTP step (target <= 1.6):")
    for n, v in ratio.items():
        print(f"  {n:16s} {v:.2f}x  {'OK' if v <= 1.6 else 'ABOVE TARGET'}")
    atomic_write_json(
        args.out,
        {
            "model": name,
            "batch": args.batch,
            "seq_len": args.seq_len,
            "threads": args.threads,
            "bf16": args.bf16,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "median_s": med,
            "times_s": times,
            "ratio": ratio,
            "target": 1.6,
            "num_regions": p1.num_regions,
            "torch": torch.__version__,
            "machine": machine(),  # the CPU with its vector extension, memory, torch
            "wall_s": time.perf_counter() - t_all,
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
