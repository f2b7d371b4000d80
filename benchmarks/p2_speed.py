"""Paper 2's speed measurement by hand (the workflow's `p2_speed_<experiment>` jobs with other settings): greedy and
`mtp-spec` with trained heads side by side under the bench protocol (same weights, prompts and threads; warm-up;
interleaved order; per-batch medians over repeats), batch 1 greedy as in App. D, under the experiment's decoding
protocols (`kv_cache`: with a KV cache, and App. D's without), with the paper's speedup (vs the 1-head MTP baseline
of the same protocol), the speedup vs greedy, the decoded head counters and the modeled speed beside each.
Needs the experiment's trainings (`snakemake -c2 results/figures/p2/fig4.png` makes them). For the final numbers:
a quiet machine (`uptime` load < 1.5), more repeats.

    python benchmarks/p2_speed.py --experiment fig4 --per-set 4 --repeats 5 --threads 2 --out /tmp/p2_speed
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from mtp_core.config import layout
from mtp_core.config.settings import config_hash
from mtp_core.papers.p2.experiments import SPEED_EXPERIMENTS
from mtp_core.papers.p2.jobs import load_main, prompt_rows
from mtp_core.papers.p2.plan import P2Plan
from mtp_core.papers.p2.speed import speed_job
from mtp_core.validation import load_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--experiment", default="fig4", choices=SPEED_EXPERIMENTS)
    ap.add_argument("--per-set", type=int, default=None, help="prompts per prompt set (default: papers.p2.speed)")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="results/benchmarks/p2/speed-by-hand")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = load_config(args.config)
    p2 = P2Plan(config)
    per_set = args.per_set or p2.s.speed.per_set
    sets = {ps: per_set for ps in p2.s.prompt_sets}
    files = [layout.prompts(ps) for ps in sets]
    rows = [{**r, "category": ps} for ps, rs in prompt_rows(files, sets, single_turn=True).items() for r in rs]
    trunks = p2.speed_trunks(args.experiment)
    by_main = {m: load_main(config, m) for m in dict.fromkeys(trunks.values())}
    decoders = p2.speed_decoders(args.experiment)
    out = Path(args.out) / args.experiment
    os.makedirs(out, exist_ok=True)
    speed_job(
        {label: by_main[m] for label, m in trunks.items()},
        rows,
        decoders,
        [str(out / f"{label}.json") for label in decoders],
        p2.speed_refs(args.experiment),
        max_new_tokens=args.max_new_tokens or p2.s.speed.max_new_tokens,
        batch_size=1,
        bench={"warmup": args.warmup, "repeats": args.repeats, "threads": args.threads},
        modeled=True,
        scale=config["scale"],
        config_hash=config_hash(config),
    )
    load = os.getloadavg()[0]
    print(f"load average at the end: {load:.2f} (speed claims need < 1.5)")
    for label in decoders:
        st = json.loads((out / f"{label}.json").read_text())["decode_stats"]
        print(
            f"{label:24s} tok/s {st['tokens_per_s']:7.2f}  vs greedy {st['speedup_vs_greedy']:.3f} "
            f"(modeled {st.get('modeled_speedup_vs_greedy', float('nan')):.3f})  vs baseline "
            f"{st['speedup_vs_baseline']:.3f} (modeled {st.get('modeled_speedup_vs_baseline', float('nan')):.3f})  "
            f"identical {st['identical_fraction']:.2f}"
        )


if __name__ == "__main__":
    main()
