"""What a projection of SmolLM2-135M costs by rows on this CPU: why a draft tree pays a jump from one row to two
before it pays per row (docs/architecture.md, "The root-only tree as a candidate").

Times `F.linear(x, W)` for x of 1, 2, 4, 8, 16 rows against a decoder layer's [1536, 576] weight (30 of them
cycled, as in a forward, so they are not cache-hot) and the [49152, 576] output head; medians of repeats.

    python benchmarks/cpu_matmul_rows.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def median_ms(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    layers = [torch.randn(1536, 576) for _ in range(30)]
    head = torch.randn(49152, 576)
    print(f"torch {torch.__version__}, {args.threads} threads; ms per call (median)")
    print("rows  layer [1536x576]  head [49152x576]")
    with torch.inference_mode():
        for m in args.rows:
            x = torch.randn(m, 576)
            layer = median_ms(lambda x=x: [F.linear(x, w) for w in layers], 30) / len(layers)
            out = median_ms(lambda x=x: F.linear(x, head), 15)
            print(f"{m:4d}  {layer:16.3f}  {out:16.2f}")


if __name__ == "__main__":
    main()
