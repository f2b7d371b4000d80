"""What a projection of SmolLM2-135M costs by rows on this CPU, under both kernels of the model key `cpu_linear`:
PyTorch's `F.linear` (`aten`: MKL, whose step from one row to two made a draft tree pay a jump before it paid per
row, docs/architecture.md, "The root-only tree as a candidate") and oneDNN on prepacked weights (`onednn`, the
default since decision 0032: `models.cpu_linear.PackedLinear`).

Times x of 1, 2, 4, 8, 16 rows against a decoder layer's [1536, 576] weight (30 of them cycled, as in a forward,
so they are not cache-hot) and the [49152, 576] output head, under `torch.inference_mode`; medians of repeats.

    python benchmarks/cpu_matmul_rows.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mtp_core.models.cpu_linear import CPU_LINEARS, pack_linears


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
    print(f"torch {torch.__version__}, {args.threads} threads; ms per call (median)")
    print("kernel  rows  layer [1536x576]  head [49152x576]")
    for kernel in CPU_LINEARS:
        layers = [torch.nn.Linear(576, 1536, bias=False) for _ in range(30)]
        head = torch.nn.Linear(576, 49152, bias=False)
        for module in (*layers, head):
            pack_linears(module, kernel)
        with torch.inference_mode():
            for m in args.rows:
                x = torch.randn(m, 576)
                layer = median_ms(lambda x=x, fs=layers: [f(x) for f in fs], 30) / len(layers)
                out = median_ms(lambda x=x, f=head: f(x), 15)
                print(f"{kernel:6s}  {m:4d}  {layer:16.3f}  {out:16.2f}")


if __name__ == "__main__":
    main()
