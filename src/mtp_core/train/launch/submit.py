"""The scheduler side of a launch: submit with submitit, re-attach to a job after a restart, wait, settle.

Slurm or local (a subprocess per task) or debug (in this process), never auto-detected; the re-attach rules
and the waiting are in the module docstring of `mtp_core.train.launch`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...io import atomic_write_json
from .records import Paths, read_json, say
from .settings import LauncherConfig, LaunchError

# sacct states worth waiting for (re-attach); COMPLETED jobs are re-attached to read their result
REATTACH_STATES = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
    "PREEMPTED",
    "COMPLETED",
}
ACTIVE_STATES = REATTACH_STATES - {"COMPLETED"}
UNKNOWN_GRACE_S = 600.0  # how long a Slurm job may stay unknown to sacct and squeue before the launcher gives up


@contextlib.contextmanager
def output_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `<output>.lock` (released by the kernel if the launcher dies)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            say(f"another launcher ({f.read().strip() or 'unknown pid'}) waits for this output; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:  # a filesystem without locks: go on unprotected
            say(f"cannot lock {path} ({e}); going on without the lock")
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        yield


def _local_controller_alive(pid: str, folder: str) -> bool:
    """Whether process `pid` is the submitit local controller of `folder` (not a reused pid, not a zombie)."""
    try:
        cmd = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    return b"submitit.local._local" in cmd and folder.encode() in cmd


def child_pids(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
    return out


def job_object(info: dict) -> Any:
    import submitit

    folder, job_id, tasks = info["folder"], str(info["job_id"]), list(range(int(info.get("tasks", 1))))
    if info["cluster"] == "slurm":
        return submitit.SlurmJob(folder=folder, job_id=job_id, tasks=tasks)
    job = submitit.LocalJob(folder=folder, job_id=job_id, tasks=tasks)
    for j in task_jobs(job):  # a dead local job has no result to wait for on a slow filesystem
        j._results_timeout_s = 2
    return job


def task_jobs(job: Any) -> list[Any]:
    return list(job._sub_jobs) or [job]


def _results_present(job: Any) -> bool:
    return all(j.paths.result_pickle.exists() for j in task_jobs(job))


def _failed_task(job: Any) -> Any | None:
    """The first task of a job of several that has written an error result, else None. Its error is the job's
    cause: its peers then fail on the broken collective (gloo) or wait in it until the process group's timeout,
    30 min (NCCL)."""
    from submitit.core import utils

    tasks = task_jobs(job)
    for j in tasks if len(tasks) > 1 else ():
        if j.paths.result_pickle.exists():
            with contextlib.suppress(Exception):
                if utils.pickle_load(j.paths.result_pickle)[0] == "error":
                    return j
    return None


def cancel(job: Any, info: dict) -> None:
    """Stop every task of a job: scancel on Slurm (srun lets the other tasks run on when one fails); on this
    machine, SIGINT to the local controller, which kills its tasks (also for a re-attached job, whose controller
    this launcher did not start)."""
    with contextlib.suppress(Exception):
        if info["cluster"] == "slurm":
            job.cancel(check=False)
        elif info["cluster"] == "local" and _local_controller_alive(str(job.job_id), info["folder"]):
            os.kill(int(job.job_id), signal.SIGINT)


def _outcome(job: Any) -> str:
    """success | error | missing, from the result pickles of every task."""
    from submitit.core import utils

    outcomes = []
    for j in task_jobs(job):
        if not j.paths.result_pickle.exists():
            return "missing"
        try:
            outcomes.append(utils.pickle_load(j.paths.result_pickle)[0])
        except Exception:
            return "error"
    return "success" if all(o == "success" for o in outcomes) else "error"


def _lost_products(job: Any) -> str | None:
    """The final model directory a finished job reported when it no longer exists (deleted since), else None."""
    from submitit.core import utils

    with contextlib.suppress(Exception):
        final = utils.pickle_load(task_jobs(job)[0].paths.result_pickle)[1].get("final_dir")
        if final and not Path(final).exists():
            return final
    return None


def _slurm_state(job: Any) -> str:
    state = job.watcher.get_state(job.job_id, mode="force").split()[0].upper()
    if state == "UNKNOWN":  # sacct may not know a job submitted a moment ago
        with contextlib.suppress(Exception):
            out = subprocess.run(
                ["squeue", "-h", "-j", str(job.job_id), "-o", "%T"], capture_output=True, text=True, timeout=30
            ).stdout.split()
            if out:
                state = out[0].upper()
    return state


def job_state(job: Any, info: dict) -> str:
    if info["cluster"] == "slurm":
        return _slurm_state(job)
    process = getattr(job, "_process", None)
    if process is not None:
        return "RUNNING" if process.poll() is None else "FINISHED"
    return "RUNNING" if _local_controller_alive(str(job.job_id), info["folder"]) else "FINISHED"


def try_reattach(info: dict, cfg: LauncherConfig, settings_hash: str) -> Any | None:
    """The job of a previous launcher worth waiting for (module docstring), or None (submit a new one)."""
    if info.get("cluster") != cfg.cluster:
        say(f"job {info.get('job_id')} ran on cluster {info.get('cluster')!r}, now {cfg.cluster!r}: new submission")
        return None
    if cfg.cluster == "debug":
        return None
    job = job_object(info)
    state = job_state(job, info)
    finished = _results_present(job)
    active = not finished and (state in ACTIVE_STATES or (cfg.cluster == "local" and state == "RUNNING"))
    if info.get("settings_hash") != settings_hash:
        if active:
            raise LaunchError(
                f"job {job.job_id} ({cfg.cluster}, {state}) was submitted for this output with other settings "
                f"(hash {info.get('settings_hash')} != {settings_hash}); cancel it"
                f"{f' (scancel {job.job_id})' if cfg.cluster == 'slurm' else f' (kill {job.job_id})'} or restore them"
            )
        say(f"previous job {job.job_id} had other settings: new submission")
        return None
    if finished:
        if _outcome(job) == "success":
            gone = _lost_products(job)
            if gone:
                say(
                    f"job {job.job_id} finished, but {gone} is gone: new submission (resumes from the newest "
                    "checkpoint)"
                )
                return None
            say(f"re-attaching to job {job.job_id} ({state}): its result is there")
            return job
        say(f"previous job {job.job_id} failed ({state}): new submission (resumes from the newest checkpoint)")
        return None
    if active:
        say(f"re-attaching to job {job.job_id} ({state}) instead of submitting again")
        return job
    say(f"previous job {job.job_id} is gone ({state}, no result): new submission (resumes from the newest checkpoint)")
    return None


def _executor(cfg: LauncherConfig, paths: Paths, name: str) -> Any:
    import submitit

    kwargs: dict[str, Any] = {}
    if cfg.cluster == "slurm":
        kwargs["slurm_max_num_timeout"] = cfg.max_num_timeout
    elif cfg.cluster == "local":
        kwargs["local_max_num_timeout"] = cfg.max_num_timeout
    ex = submitit.AutoExecutor(folder=paths.folder, cluster=cfg.cluster, **kwargs)
    params: dict[str, Any] = {
        "name": name,
        "timeout_min": cfg.timeout_min,
        "nodes": cfg.nodes,
        "tasks_per_node": cfg.tasks_per_node,
        "gpus_per_node": cfg.gpus_per_node,
        "cpus_per_task": cfg.cpus_per_task,
        "mem_gb": cfg.mem_gb,
    }
    if cfg.cluster == "slurm":
        site = {  # unset in config: the site's values, from the environment variables of the slurm/ profile
            "partition": (os.environ.get("MTP_SLURM_GPU_PARTITION") if cfg.gpus_per_node else None)
            or os.environ.get("MTP_SLURM_PARTITION"),
            "account": os.environ.get("MTP_SLURM_ACCOUNT"),
        }
        for key in ("partition", "account", "qos", "constraint", "exclude"):
            value = getattr(cfg, key) if getattr(cfg, key) is not None else site.get(key)
            if value:
                params[f"slurm_{key}"] = value
        params["slurm_signal_delay_s"] = cfg.signal_delay_s
        if cfg.slurm_additional_parameters:
            params["slurm_additional_parameters"] = dict(cfg.slurm_additional_parameters)
        if cfg.slurm_setup:
            params["slurm_setup"] = list(cfg.slurm_setup)
        # a rank that fails (e.g. cannot bind the rendezvous port) ends the step: the other ranks would wait in the
        # rendezvous until its timeout, holding the job (seen in CI)
        srun_args = list(cfg.slurm_srun_args)
        if not any(a.startswith(("--kill-on-bad-exit", "-K")) for a in srun_args):
            srun_args.insert(0, "--kill-on-bad-exit=1")
        params["slurm_srun_args"] = srun_args
    if cfg.cluster == "debug":
        params = {}
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    if cfg.cluster == "local":  # not reachable through AutoExecutor's parameter check (submitit 1.5.4)
        ex._executor.update_parameters(signal_delay_s=cfg.signal_delay_s)
    return ex


def submit(cfg: LauncherConfig, paths: Paths, trainer: Any, name: str, record: dict) -> Any:
    from submitit.helpers import clean_env

    ex = _executor(cfg, paths, name)
    try:
        with clean_env():  # no SLURM_*/SUBMITIT_*/torch.distributed variables leak into the new job
            job = ex.submit(trainer)
    except Exception as e:
        raise LaunchError(f"submitting the training to {cfg.cluster} failed: {type(e).__name__}: {e}") from None
    if cfg.cluster == "local":
        for j in task_jobs(job):
            j._results_timeout_s = 2
    now = time.time()
    info = read_json(paths.job_json) or {}
    submissions = list(info.get("submissions", []))
    submissions.append({"job_id": str(job.job_id), "cluster": cfg.cluster, "submitted_at": now})
    record.update(
        job_id=str(job.job_id),
        cluster=cfg.cluster,
        folder=str(paths.folder),
        tasks=cfg.num_tasks,
        submitted_at=now,
        submissions=submissions,
    )
    atomic_write_json(paths.job_json, record)
    say(
        f"submitted job {job.job_id} ({cfg.cluster}, {cfg.nodes} node(s) x {cfg.tasks_per_node} task(s), "
        f"{cfg.gpus_per_node} GPU(s) per node); logs: {job.paths.folder}"
    )
    return job


def _last_step(run_dir: Path) -> str:
    try:
        with open(run_dir / "curves.csv", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
        return lines[-1].split(",")[0] if len(lines) > 1 else "0"
    except OSError:
        return "0"


def wait(job: Any, info: dict, cfg: LauncherConfig, paths: Paths, max_steps: int | None) -> str:
    """Block until every task's result is there or the job is over; returns the last state seen. A task that
    fails ends the wait at once: the other tasks are cancelled and its error is raised."""
    if info["cluster"] == "debug":
        return "DEBUG"
    start = last_poll = last_progress = time.monotonic()
    state = job_state(job, info)
    final_since: float | None = None
    unknown_since: float | None = None
    while True:
        if _results_present(job):
            return state
        failed = _failed_task(job)
        if failed is not None:  # its error is the job's: stop the others now, raise it (with its traceback)
            say(f"job {job.job_id}: task {failed.task_id} failed; cancelling the other tasks")
            cancel(job, info)
            failed.result()
        now = time.monotonic()
        if now - last_poll >= cfg.poll_s or info["cluster"] == "local":
            state = job_state(job, info)
            last_poll = now
        if info["cluster"] == "slurm":
            # UNKNOWN: neither sacct nor squeue answers (a controller restart, slurmdbd down): keep waiting,
            # up to UNKNOWN_GRACE_S without an answer, rather than give up on a job that may be running
            over = state not in ACTIVE_STATES and state != "UNKNOWN"
            if state == "UNKNOWN":
                unknown_since = unknown_since or now
                over = now - unknown_since > UNKNOWN_GRACE_S
            else:
                unknown_since = None
        else:
            over = state != "RUNNING"
        if over:  # finished: give the filesystem a moment to show the result pickles
            final_since = final_since or now
            if now - final_since > (30.0 if info["cluster"] == "slurm" else 3.0):
                return state
        else:
            final_since = None
        if now - last_progress >= cfg.progress_s:
            last_progress = now
            steps = (
                f"step {_last_step(paths.run_dir)}/{max_steps}" if max_steps else f"step {_last_step(paths.run_dir)}"
            )
            say(f"job {job.job_id}: {state}, {steps}, waited {now - start:.0f} s")
        time.sleep(0.5 if info["cluster"] == "local" else 1.0)


def settle(job: Any, info: dict, state: str, limit_s: float = 30.0) -> str:
    """The state once Slurm has closed the allocation (so that sacct's elapsed time is final), or the last one
    seen after `limit_s`."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            state = job_state(job, info)
        if state not in ACTIVE_STATES and state != "UNKNOWN":
            break
        time.sleep(1.0)
    return state


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def failure_message(job: Any, info: dict, state: str, error: BaseException) -> str:
    head = [f"training job {job.job_id} ({info['cluster']}) failed (state {state})"]
    logs = [f"  {p}" for j in task_jobs(job) for p in (j.paths.stderr, j.paths.stdout)]
    head.append("submitit logs:\n" + "\n".join(logs))
    body = str(error)
    if len(body) > 20000:
        body = body[:4000] + "\n[...]\n" + body[-12000:]
    head.append(f"--- {type(error).__name__} from the job ---\n{body}")
    t0 = task_jobs(job)[0]
    if "Traceback" not in body:
        tail = _tail(t0.paths.stderr)
        if tail:
            head.append(f"--- last lines of {t0.paths.stderr} ---\n{tail}")
    return "\n".join(head)


@contextlib.contextmanager
def no_pdb() -> Iterator[None]:
    """The debug executor opens pdb on an exception; without a terminal (Snakemake, tests) that would hang or
    fail, so it is skipped there."""
    import pdb

    if sys.stdin is not None and sys.stdin.isatty():
        yield
        return
    orig = pdb.post_mortem
    pdb.post_mortem = lambda *a, **k: say("debug cluster: pdb skipped (stdin is not a terminal)")
    try:
        yield
    finally:
        pdb.post_mortem = orig
