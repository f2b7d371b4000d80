"""The files of one launch and what they record (module docstring of `mtp_core.train.launch`).

Next to the rule's output `<output>`: `<output>.job.json` (the submission record), `<output>.cost.json` (per job:
state, elapsed, GPUs, GPU-hours, attempts, Slurm's `sacct` rows), `<output>.lock`, `<output>.submitit/<job id>/`;
in the run directory: `attempts.jsonl` and `run_settings.json`, the stamp of the settings its state was trained
with (`trajectory_hash`), so that a changed recipe never resumes old state (`supersede_stale_state`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...io import atomic_write_json, stable_hash
from ..config import TrainConfig
from .settings import LauncherConfig


@dataclass
class Paths:
    """The launcher's files next to the rule's output, and the run directory (checkpoints, curves, model)."""

    output: Path
    run_dir: Path

    @property
    def job_json(self) -> Path:
        return self.output.with_name(self.output.name + ".job.json")

    @property
    def cost_json(self) -> Path:
        return self.output.with_name(self.output.name + ".cost.json")

    @property
    def lock(self) -> Path:
        return self.output.with_name(self.output.name + ".lock")

    @property
    def folder(self) -> Path:
        return self.output.with_name(self.output.name + ".submitit") / "%j"


def say(msg: str) -> None:
    print(f"mtp-launch: {msg}", file=sys.stderr, flush=True)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def sacct_rows(job_id: str) -> list[dict]:
    fmt = ["JobIDRaw", "State", "ElapsedRaw", "AllocTRES", "NNodes", "Submit", "Start", "End", "NodeList"]
    try:
        out = subprocess.run(
            ["sacct", "-j", str(job_id), "-X", "-D", "-P", "-n", f"--format={','.join(fmt)}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [dict(zip(fmt, line.split("|"))) for line in out.stdout.splitlines() if line.strip()]


def gpus_of(tres: str) -> int | None:
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            return int(value)
    return None


def record_cost(paths: Paths, job: Any, info: dict, cfg: LauncherConfig, state: str, waited_s: float) -> dict:
    """Write `<output>.cost.json`: this job's entry (replacing an older one of the same id) and the totals."""
    job_id = str(job.job_id)
    attempts = [
        a
        for a in (json.loads(line) for line in read_lines(paths.run_dir / "attempts.jsonl"))
        if str(a.get("job_id")) == job_id
    ]
    gpus = cfg.nodes * cfg.gpus_per_node
    entry: dict[str, Any] = {
        "job_id": job_id,
        "cluster": info["cluster"],
        "state": state,
        "submitted_at": info.get("submitted_at"),
        "launcher_waited_s": waited_s,
        "nodes": cfg.nodes,
        "tasks": cfg.num_tasks,
        "gpus": gpus,
        "attempts": attempts,
        "requeues": max(0, len(attempts) - 1),
        "elapsed_s": sum(float(a.get("elapsed_s") or 0) for a in attempts),
    }
    if info["cluster"] == "slurm":
        rows = sacct_rows(job_id)
        entry["sacct"] = rows
        with contextlib.suppress(Exception):
            entry["info"] = job.get_info()
        if rows:
            entry["elapsed_s"] = float(sum(int(r["ElapsedRaw"] or 0) for r in rows))
            alloc = [g for g in (gpus_of(r["AllocTRES"]) for r in rows) if g is not None]
            if alloc:
                entry["gpus"] = max(alloc)
            entry["requeues"] = max(0, len(rows) - 1)
    entry["gpu_hours"] = entry["elapsed_s"] * entry["gpus"] / 3600.0
    cost = read_json(paths.cost_json) or {}
    jobs = [j for j in cost.get("jobs", []) if str(j.get("job_id")) != job_id] + [entry]
    cost = {
        "output": str(paths.output),
        "run_dir": str(paths.run_dir),
        "jobs": jobs,
        "total": {
            "jobs": len(jobs),
            "elapsed_s": sum(j["elapsed_s"] for j in jobs),
            "gpu_hours": sum(j["gpu_hours"] for j in jobs),
            "requeues": sum(j["requeues"] for j in jobs),
        },
    }
    atomic_write_json(paths.cost_json, cost)
    return cost


STAMP = "run_settings.json"
# train keys that do not change the optimisation steps; resuming across a change of these is the same training
UNSTAMPED_TRAIN_KEYS = (
    "threads",
    "progress",
    "log_every",
    "checkpoint_every",
    "keep_last",
    "save_steps",
    "resume",
    "fused",
)
# model keys that only inference reads (`models.cpu_linear`); a training step is the same under either value
UNSTAMPED_MODEL_KEYS = ("cpu_linear",)


def trajectory_hash(method: str, entry: str, settings: dict) -> str:
    """Hash of what decides the training's steps: method, entry and settings, without `UNSTAMPED_TRAIN_KEYS` and
    (constant schedule) without `max_steps`, since the first N steps of a constant schedule do not depend on it, and
    without the model's `UNSTAMPED_MODEL_KEYS`."""
    model = settings.get("model")
    if isinstance(model, dict):
        settings = {**settings, "model": {k: v for k, v in model.items() if k not in UNSTAMPED_MODEL_KEYS}}
    train = settings.get("train")
    if isinstance(train, dict):
        constant = TrainConfig.from_dict(train).schedule == "constant"  # the schedule as the loop will run it
        drop = set(UNSTAMPED_TRAIN_KEYS) | ({"max_steps"} if constant else set())
        settings = {**settings, "train": {k: v for k, v in train.items() if k not in drop}}
    return stable_hash({"method": method, "entry": entry, "settings": settings})


def supersede_stale_state(paths: Paths, stamp: str) -> None:
    """Before a new submission: move state trained with other settings (or of unknown settings) out of the way,
    so it is never resumed (module docstring), and stamp the run directory with `stamp`."""
    run_dir = paths.run_dir
    old = read_json(run_dir / STAMP) or {}
    if old.get("hash") != stamp:
        launcher_files = paths.output.name if paths.output.parent == run_dir else None
        stale = [
            p
            for p in run_dir.iterdir()
            if p.name not in (STAMP, "superseded") and not (launcher_files and p.name.startswith(launcher_files))
        ]
        if stale and (old or (run_dir / "checkpoints").is_dir()):
            dest = run_dir / "superseded" / f"{time.strftime('%Y%m%dT%H%M%S')}-{old.get('hash', 'unstamped')}"
            dest.mkdir(parents=True)
            for p in stale:
                p.rename(dest / p.name)
            say(
                f"{run_dir} held training state of other settings ({old.get('hash', 'no stamp')} != {stamp}): "
                f"moved {len(stale)} entries to {dest}; training starts from step 0"
            )
    atomic_write_json(run_dir / STAMP, {"hash": stamp, "written_at": time.time()})
