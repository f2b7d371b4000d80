"""Where a compiled greedy step's time goes (a diagnosis, not the bench protocol): greedy on one random 256-token
prompt, 64 new tokens, three times in a row, on each `torch.compile` backend given and then eager, at a paper
model's shape with seeded random weights (`decode_costs.SHAPES`). Run with `TORCH_LOGS=perf_hints,cudagraphs` to
see whether inductor's CUDA graphs are recorded and replayed.

    TORCH_LOGS=perf_hints,cudagraphs python benchmarks/compiled_greedy_backends.py smollm2-135m inductor cudagraphs
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import decode_costs  # noqa: E402

from mtp_core.decoding import StopCriteria, build_decoder, static  # noqa: E402
from mtp_core.models.load import load_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=sorted(decode_costs.SHAPES))
    ap.add_argument("backends", nargs="*", default=["inductor"], help="torch.compile backends (inductor, cudagraphs)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lm = load_model({**decode_costs.SPEC, "name": args.shape}, checkpoint=decode_costs.arch_dir(args.shape, Path(tmp)),
                        device=args.device, dtype=args.dtype, random_weights=0)  # fmt: skip
    prompt = list(range(10, 266))
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def run(label: str, **params) -> None:
        dec = build_decoder("greedy", lm.model, lm.tokenizer, **params)
        for i in range(3):
            sync()
            t = time.perf_counter()
            g = dec.generate([prompt], 64, StopCriteria())[0]
            sync()
            dt = time.perf_counter() - t
            print(f"{label} run {i}: {len(g.tokens) / dt:.1f} tok/s ({1000 * dt / len(g.tokens):.2f} ms/token), "
                  f"compile {dec.compile_s:.1f} s", flush=True)  # fmt: skip

    for backend in args.backends:
        static.COMPILE_BACKEND = backend
        run(f"compiled[{backend}]", backend="compiled")
    run("eager")


if __name__ == "__main__":
    main()
