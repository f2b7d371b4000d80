"""`mtp-repro tree-search`: paper 5's offline search for YOUR heads, model, machine and prompts (what Hydra's users
asked for, issue #3, and never got): the greedy acceptance frontier (Algorithm 1) per depth cap, its debiasing,
the throughput frontier priced on this machine, EntMTP* and the scheduler's bank and τ, on any prompt file.

```
mtp-repro tree-search --model smollm2-135m-math --heads results/models/p5/heads/hydra/heads \\
    --prompts my_prompts.jsonl --out results/tree-search/mine [--depths 1 2 3 4] [--budgets 4 8 16 32 64]
```
`--engine offline` (default): the exact rank-table simulation at temperature 0 (one greedy pass over the prompts,
no forward per candidate), writing the files of the workflow's frontier job (`search.json`, `self.json`,
`throughput.json`, `bank.json` for the `entmtp` decoder, ...). `--engine rollout` runs the paper's union-tree
rollout per addition (temperature > 0 with typical acceptance, `--temperature`): `search.json` and `self.json`
only (one decode of every prompt per added node: meant for a GPU).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..io import InputError, atomic_write_json
from ..validation import load_config
from .decode import load_named_model, load_prompt_rows


def cmd_tree_search(args: argparse.Namespace) -> None:
    from ..heads import load_heads
    from ..papers.p5.bank import frontier_id, resolve_tree
    from ..papers.p5.frontier import pareto
    from ..papers.p5.jobs import frontier_job
    from ..papers.p5.rollout import rollout_search, self_rollout
    from ..papers.p5.stages import FrontierSettings

    config = load_config(args.config)
    rows = load_prompt_rows(args.prompts, Path(args.results), args.n)
    if not Path(args.heads, "heads.json").is_file():
        raise InputError(f"--heads {args.heads}: not a heads directory (no heads.json)")
    loaded = load_named_model(config, args.model, Path(args.results), args.checkpoint)
    kw: dict[str, Any] = {
        "depths": tuple(args.depths),
        "budgets": tuple(args.budgets),
        "tolerance": args.tolerance,
        "include_greedy": args.include_greedy,
    }
    if args.score_feature:
        kw["score_feature"] = args.score_feature
    settings = FrontierSettings(**kw)
    out = Path(args.out)
    if args.engine == "offline":
        job = {
            "calibration": {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size},
            "max_prompt_tokens": args.max_prompt_tokens,
            "max_rows": args.max_rows,
            "threads": args.threads or config["bench"]["threads"],
        }
        meta = {"model": args.model, "heads_dir": args.heads, "prompts": args.prompts, "engine": "offline"}
        frontier_job(loaded, args.heads, _prompt_file(rows, out), str(out), settings, job, meta)
        b = json.loads((out / "bank.json").read_text())
        print(f"EntMTP* (throughput-optimal tree): {b['best']}  {b['trees'][b['best']]['paths']}")
        print(
            f"bank: {', '.join(b['order'])};  S {b['conservative']}, B {b['aggressive']}, "
            f"tau_on {b['tau_on']}, tau_off {b['tau_off']}"
        )
        print(f"modeled tok/s: {json.dumps(b['modeled'])};  files in {out}")
        return
    heads = load_heads(args.heads, loaded.model).bind(loaded.model)
    prompts = [loaded.encode(r["prompt"]) for r in rows]
    decode = {"acceptance": "typical", "temperature": args.temperature} if args.temperature > 0 else {}
    stop_at = int(max(settings.budgets) * (1 + settings.tolerance))
    history, idx = {}, 0
    for d in settings.depths:
        history[str(d)] = rollout_search(loaded, heads, prompts, d, stop_at, args.max_new_tokens, **decode)
        for r in history[str(d)]:
            r["id"] = frontier_id(idx, r["n_nodes"], d)
            idx += 1
    search = {"per_depth_history": history, "settings": {**kw, "engine": "rollout", "temperature": args.temperature}}
    default = resolve_tree(settings.default_tree)
    self_rows = [
        {
            "id": settings.default_tree,
            "n_nodes": len(default),
            "biased": None,
            "tree": [list(p) for p in default],
            "self": self_rollout(loaded, heads, prompts, default, args.max_new_tokens, **decode),
        }
    ]
    for r in pareto([r for h in history.values() for r in h], "mean_accept"):
        tree = tuple(tuple(p) for p in r["tree"])
        own = self_rollout(loaded, heads, prompts, tree, args.max_new_tokens, **decode)
        self_rows.append(
            {k: r[k] for k in ("id", "n_nodes", "depth", "tree")} | {"biased": r["mean_accept"], "self": own}
        )
    atomic_write_json(out / "search.json", search)
    atomic_write_json(out / "self.json", {"rows": self_rows})
    print(
        f"{idx} additions over depths {list(settings.depths)}; {len(self_rows) - 1} frontier trees re-scored; "
        f"files in {out}"
    )


def _prompt_file(rows: list[dict], out: Path) -> str:
    """The prompts as the frontier job reads them (a JSONL beside the outputs)."""
    from ..io import atomic_write_jsonl

    path = out / "prompts.jsonl"
    atomic_write_jsonl(path, rows)
    return str(path)


def add_commands(sub: Any) -> None:
    t = sub.add_parser(
        "tree-search", help="paper 5's tree search (frontier, debiasing, throughput, bank) on any prompts"
    )
    t.add_argument("--config", default="config.yaml", help="config file (default: config.yaml)")
    t.add_argument("--model", required=True, help="a model declared in the config (the heads' trunk)")
    t.add_argument("--checkpoint", help="load the trunk's weights from this HF directory instead")
    t.add_argument("--results", default="results", help="results directory (default: results)")
    t.add_argument("--heads", required=True, help="a heads directory (heads.json + heads.safetensors)")
    t.add_argument("--prompts", required=True, help="prompt-set name or a JSONL file (prompt | question | turns)")
    t.add_argument("--n", type=int, help="first N prompts")
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument("--engine", choices=("offline", "rollout"), default="offline")
    t.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4])
    t.add_argument("--budgets", type=int, nargs="+", default=[4, 8, 16, 32, 64], help="drafted nodes")
    t.add_argument("--tolerance", type=float, default=0.4)
    t.add_argument("--max-new-tokens", type=int, default=128, help="continuation length per prompt")
    t.add_argument("--batch-size", type=int, default=8, help="calibration batch (offline engine)")
    t.add_argument("--max-prompt-tokens", type=int, help="skip longer prompts")
    t.add_argument("--max-rows", type=int, default=64, help="largest verification chunk priced")
    t.add_argument("--threads", type=int, help="torch threads for calibration and prices (default: config bench)")
    t.add_argument("--score-feature", help="the scheduler's score (default path_value_greedy_depth4)")
    t.add_argument(
        "--include-greedy",
        action="store_true",
        help="the root-only tree (plain greedy steps) is a candidate: EntMTP* where every tree is slower",
    )
    t.add_argument("--temperature", type=float, default=0.0, help="rollout engine: > 0 = typical acceptance")
    t.set_defaults(func=cmd_tree_search)
