"""`python -m mtp_core.cli train`: run one training through submitit, wait for it, survive restarts.

Every training rule is a local rule whose command is this launcher:
```
python -m mtp_core.cli train --output results/train/p1/main/train.json --method p1 \\
    --run-dir results/train/p1/main --settings '<run settings JSON or file>' --launcher '<launcher JSON or file>'
python -m mtp_core.cli train --output ... --method p1 --config config.yaml --run main [--cluster local]
```
It builds `submitit.AutoExecutor(folder=<output>.submitit/%j, cluster=<launcher.cluster>)` (the cluster comes
from config, `slurm` | `local` | `debug`, and is never auto-detected: `AutoExecutor` would pick Slurm wherever
`srun` exists), submits a `Trainer` (a `submitit.helpers.Checkpointable`) inside `clean_env()`, and
waits. Files next to the rule's output `<output>`:
* `<output>.job.json`: job id, cluster, submitit folder, number of tasks, settings hash, and every submission
  ever made for this output; written as soon as a job is submitted;
* `<output>.cost.json`: per job: state, elapsed, nodes, GPUs, GPU-hours, each attempt (requeues included), and
  on Slurm the `sacct -D` rows (a `benchmark:` on a waiting rule would only time the wait);
* `<output>.submitit/<job id>/`: submitit's pickles and logs (`<id>_<task>_log.out|err`);
* `<output>.lock`: held while a launcher waits for this output (a second launcher waits for the first);
* `<output>`: the result (JSON: final model dir, steps, job, attempts), written atomically, only on success.
The run directory (`--run-dir`, default: the output's directory) holds the loop's files (`checkpoints/`,
`curves.csv`, `model/`, `exports/`, `train_summary.json`), `attempts.jsonl` (one line per attempt) and
`run_settings.json`, the stamp of the settings its state was trained with (`trajectory_hash`: method and settings
without the keys that do not change the steps, such as threads, logging and checkpoint intervals, and without
`max_steps` under a constant schedule, so a longer run continues a shorter one). A new submission whose stamp
differs (a changed recipe) never resumes that state: the run directory's files move to
`superseded/<time>-<old stamp>/` (kept, and said on stderr) and the training starts from step 0. Declare
only `<output>` (and files the job writes atomically, such as `model/`) as rule outputs: Snakemake deletes
declared outputs of failed or incomplete jobs, and the checkpoints must survive for the resume.

**Re-attach.** If `<output>.job.json` names a job, the launcher asks its state before submitting: on Slurm
`job.watcher.get_state(job_id, mode="force")` (sacct; squeue when sacct does not know the job yet); PENDING,
RUNNING, REQUEUED, CONFIGURING, COMPLETING, RESIZING, SUSPENDED, PREEMPTED and COMPLETED are re-attached
(COMPLETED: its result is read, nothing runs again); a local job is re-attached while its controller process
(the job id is its pid) is alive or when its result is there. A failed, cancelled or vanished job is replaced
by a new submission, which resumes from the newest checkpoint. A job submitted with other settings is never
re-attached; if it is still active the launcher stops with an error naming it. So after Snakemake is killed:
`snakemake --unlock`, rerun (`rerun-incomplete`), and the launcher waits for the same job.

**Preemption and timeout.** On Slurm, `--signal=USR2@<signal_delay_s>` (submitit's default, 90 s) warns every
task before the time limit, and `job._interrupt()` / a preemption sends SIGTERM then USR2. The trainer defers the
signal to the next step boundary: its handler only sets a flag, which the training loop's callback all-reduces
over the ranks after each step; when set, the loop saves a resumable state at that step (`loop.StopTraining`),
then rank 0 runs submitit's own handler, which calls `Trainer.checkpoint()` (records the attempt and returns
`DelayedSubmission(self)`), pickles it and requeues the job (`scontrol requeue` on Slurm; exit code 144, on which
the local controller restarts the tasks). The requeued job resumes from that state: a preemption loses no
finished step (at most the step in flight), and the loop resumes bit for bit. A signal that arrives before the
training loop runs (model loading) is handled by submitit directly: `checkpoint()` then requeues and the job
resumes from the newest interval state. A hard kill (node failure, SIGKILL) loses at most one checkpoint
interval: `train.checkpoint_every` steps, or `checkpoint_interval_min` minutes (a wall-clock interval the
trainer adds through the loop's `SAVE` callback result). Saving inside the signal handler itself is avoided on
purpose: the handler runs between two bytecodes, possibly half-way through an optimiser update.
submitit 1.5.4 local executor: `LocalJob._interrupt()` sends USR2 to the controller process, which has no
handler for it and dies (the task goes on, orphaned); use `interrupt_job()` (or `--interrupt`), which signals
the tasks as Slurm does. Local requeue = the same controller (same job id) restarts the tasks after exit code
144, up to `max_num_timeout` timeouts; a local `timeout_min` also sends USR2 `signal_delay_s` before the end.

**Distributed.** `nodes x tasks_per_node` processes; with more than one, each exports submitit's
`TorchDistributedEnvironment` (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK) and initialises the process group
(NCCL on CUDA, gloo on CPU); `strategy` auto = DDP, or `fsdp` (FSDP2, the teacher sharded and frozen) or `ddp`.
The loop keeps the global batch: each process runs `global / (micro x world)` micro-batches named by their
global index, so the data of a step and the update do not depend on the process count.

**Failure.** A failed job makes the launcher exit 1 after printing, on stderr (the rule's log), the job id,
state, the submitit log paths and the job's traceback (or the tail of its error log). When one task of several
fails, the launcher raises that task's error, the cause, and cancels the others as soon as its error result is
written (`submit.wait`): they would fail on the broken collective (gloo), or wait in it until the process group's
30-min timeout (NCCL; srun lets them).

Methods (`methods.py`): a name -> a `module:function` entry run in the job, a settings check run before
submitting, and optionally a resolver of (config, run name) -> settings: the core's `sft` and every registered
paper's (`mtp_core.config.registry`), their check made by `methods.MethodSettings`
(torch-free) and entry by `methods.TrainingMethod`; `--method module:attr` runs
any `Method` or entry function.

Modules, one job each: `settings` (`LauncherConfig`), `methods`, `submit` (the scheduler side: submit,
re-attach, wait), `job` (the job side: the `Trainer` and the preemption watch), `records` (the files of a
launch: job and cost records, the run directory's stamp), `cli` (the command line); `launch` and
`interrupt_job` here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from ...io import atomic_write_json, stable_hash
from ..config import TrainConfig
from .job import Trainer
from .methods import Method, get_method, resolve
from .records import Paths, read_json, record_cost, say, supersede_stale_state, trajectory_hash
from .settings import CLUSTERS, LauncherConfig, LaunchError
from .submit import (
    child_pids,
    failure_message,
    job_object,
    job_state,
    no_pdb,
    output_lock,
    settle,
    submit,
    try_reattach,
    wait,
)

__all__ = [
    "CLUSTERS",
    "LaunchError",
    "LauncherConfig",
    "Method",
    "get_method",
    "interrupt_job",
    "launch",
    "trajectory_hash",
]


def launch(
    output: str | os.PathLike,
    method: str,
    settings: dict,
    launcher: LauncherConfig | dict | None = None,
    run_dir: str | os.PathLike | None = None,
    *,
    reattach: bool = True,
) -> dict:
    """Submit (or re-attach to) the training of `settings` with `method`, wait, and write `output` on success.

    Returns the output record; raises `LaunchError` (message: job, state, log paths, traceback) on failure.
    """
    cfg = launcher if isinstance(launcher, LauncherConfig) else LauncherConfig.from_dict(launcher)
    m = get_method(method)
    output = Path(output).resolve()
    paths = Paths(output, Path(run_dir).resolve() if run_dir is not None else output.parent)
    if m.check:
        settings = resolve(m.check)(settings)
    max_steps = None
    if isinstance(settings.get("train"), dict):
        tc = TrainConfig.from_dict(settings["train"])
        tc.accumulation(cfg.num_tasks)  # the global batch must split over the processes: fail before submitting
        max_steps = tc.max_steps
    settings_hash = stable_hash(
        {"method": method, "entry": m.entry, "settings": settings, "world": cfg.num_tasks, "strategy": cfg.strategy}
    )
    name = cfg.name or f"train-{m.name.replace(':', '.')}-{paths.run_dir.name}"
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    if output.exists():
        output.unlink()  # written again only on success
    t0 = time.monotonic()
    with output_lock(paths.lock):
        info = read_json(paths.job_json) if reattach else None
        job = try_reattach(info, cfg, settings_hash) if info and info.get("job_id") else None
        if job is None:
            supersede_stale_state(paths, trajectory_hash(method, m.entry, settings))
            trainer = Trainer(m.name, m.entry, settings, str(paths.run_dir), cfg.as_dict())
            record = {
                "output": str(output),
                "method": m.name,
                "run_dir": str(paths.run_dir),
                "settings_hash": settings_hash,
                "launcher": cfg.as_dict(),
            }
            job = submit(cfg, paths, trainer, name, record)
            info = record
        state = "UNKNOWN"
        try:
            with no_pdb():
                state = wait(job, info, cfg, paths, max_steps)
                results = job.results()
        except Exception as e:
            if info["cluster"] == "slurm":
                state = settle(job, info, state)
            elif info["cluster"] == "local":
                with contextlib.suppress(Exception):
                    state = job_state(job, info)
            record_cost(paths, job, info, cfg, state, time.monotonic() - t0)
            raise LaunchError(failure_message(job, info, state, e)) from None
        if info["cluster"] == "slurm":  # the results are written before the allocation ends: wait for sacct
            state = settle(job, info, state)
        elif info["cluster"] == "local":
            with contextlib.suppress(Exception):
                state = job_state(job, info)
        cost = record_cost(
            paths, job, info, cfg, "COMPLETED" if state in ("FINISHED", "DEBUG") else state, time.monotonic() - t0
        )
        main = results[0] if results else {}
        out = {
            "method": m.name,
            "run_dir": str(paths.run_dir),
            "final_dir": main.get("final_dir"),
            "steps": main.get("steps"),
            "resumed_from": main.get("resumed_from"),
            "job_id": str(job.job_id),
            "cluster": info["cluster"],
            "settings_hash": settings_hash,
            "attempts": main.get("attempts", []),  # once: `result` and `cost` below leave them out
            "result": {k: v for k, v in main.items() if k != "attempts"},
            "cost": {k: v for k, v in cost["jobs"][-1].items() if k != "attempts"},
        }
        atomic_write_json(output, out)
    say(f"job {job.job_id} done: {out['steps']} steps, {len(out['attempts'])} attempt(s); wrote {output}")
    return out


def interrupt_job(output: str | os.PathLike, timeout: bool = False) -> str:
    """Send the job of `output` what a preemption (SIGTERM then USR2) or a timeout (USR2) sends: Slurm through
    submitit's `job._interrupt()`; local to the task processes (LocalJob._interrupt would kill the controller)."""
    paths = Paths(Path(output).resolve(), Path("."))
    info = read_json(paths.job_json)
    if not info:
        raise LaunchError(f"no job recorded for {output} ({paths.job_json} missing)")
    job = job_object(info)
    if info["cluster"] == "slurm":
        job._interrupt(timeout=timeout)
    elif info["cluster"] == "local":
        from submitit.local.local import LocalJobEnvironment

        tasks = child_pids(int(info["job_id"]))
        if not tasks:
            raise LaunchError(f"local job {info['job_id']} has no running task")
        for sig in ([] if timeout else [signal.SIGTERM]) + [LocalJobEnvironment._usr_sig()]:
            for pid in tasks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(0.2)
    else:
        raise LaunchError("a debug job runs inside its launcher: nothing to interrupt")
    return str(info["job_id"])
