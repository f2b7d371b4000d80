"""The job side of a launch: the submitted `Trainer`, run on every rank of the job (devices, process group,
DDP/FSDP2 strategy, logging), and the preemption watch that turns Slurm's requeue signal into a saved state at
the next step boundary (module docstring of `mtp_core.train.launch`: "Preemption and timeout")."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable, DelayedSubmission

from .methods import resolve
from .settings import LauncherConfig


def _job_environment() -> Any:
    """submitit's JobEnvironment when running inside a submitit job, else None."""
    try:
        from submitit import JobEnvironment

        return JobEnvironment()
    except RuntimeError:
        return None


def rendezvous_port(job_id: str, ephemeral: str | os.PathLike = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The job's rendezvous (MASTER_PORT) port, the same on every rank (drawn with the job id as seed) and below
    the host's ephemeral port range, which outgoing connections take from (gloo's among them): submitit draws
    from 20000-60000, mostly inside Linux's default 32768-60999, where a port can be in use (EADDRINUSE, seen
    in CI with several trainings on one node). Where the range starts below 20001, submitit's range is kept."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path(ephemeral).read_text().split()[0])
    lo, hi = (20000, low - 1) if low > 20000 else (20000, 60000)
    return random.Random(job_id).randint(lo, hi)


def _pick_device(setting: str, local_rank: int) -> Any:
    import torch

    if setting == "cpu" or (setting == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("launcher.device is 'cuda' but no CUDA device is visible to this task")
    dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


class _PreemptionWatch:
    """The loop callback of the trainer: a preemption / timeout signal becomes `StopTraining` at the next step
    boundary (all ranks agree through an all-reduce), a due wall-clock interval becomes `SAVE`. A signal that
    comes before the first step (model loading) is left to submitit at once: nothing to save yet."""

    def __init__(self, dist: Any, device: Any, interval_min: float):
        self.dist, self.device, self.interval_s = dist, device, 60.0 * interval_min
        self.signalled = False
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.last_save = time.monotonic()
        self.sig: int | None = None
        self.submitit_handler: Any = None
        self.rank, self.cluster = 0, None

    def install(self, env: Any) -> None:
        """Take over the requeue signal after submitit installed its handler (kept, run at the boundary)."""
        if env is None or env.cluster not in ("slurm", "local"):
            return
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        self.rank, self.cluster = env.global_rank, env.cluster
        self.sig = env._usr_sig()
        self.submitit_handler = signal.getsignal(self.sig)
        signal.signal(self.sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.first_step is None:  # before the first step: requeue now, from the newest saved state
            print(
                f"mtp-launch: caught {signal.Signals(signum).name} before training started: requeueing",
                file=sys.stderr,
                flush=True,
            )
            self._leave(signum)
        self.signalled = True
        print(
            f"mtp-launch: caught {signal.Signals(signum).name}: checkpointing at the end of this step",
            file=sys.stderr,
            flush=True,
        )

    def __call__(self, step: int, row: dict) -> Any:
        import torch

        from ..loop import SAVE, StopTraining

        if self.first_step is None:
            self.first_step = step
        self.last_step = step
        due = self.interval_s > 0 and time.monotonic() - self.last_save >= self.interval_s
        flags = torch.tensor([float(self.signalled), float(due)], dtype=torch.float64, device=self.device)
        flags = self.dist.all_reduce_sum(flags)
        if flags[0] > 0:
            raise StopTraining(f"requeue signal: stopping at step {step}")
        if flags[1] > 0:
            self.last_save = time.monotonic()
            return SAVE
        return None

    def _leave(self, signum: int | None = None, wait_s: float = 0.0) -> None:
        """Rank 0 runs submitit's handler (checkpoint(), pickle, requeue, exit); the other ranks exit (local: the
        controller restarts every task once rank 0 exits for requeue) or wait for the requeue to kill them."""
        if self.rank == 0:
            handler = self.submitit_handler
            if not callable(handler):
                raise RuntimeError(f"no submitit handler for the requeue signal (found {handler!r})")
            handler(signum or self.sig, None)  # exits (requeued) or raises UncompletedJobError (no requeue left)
            raise RuntimeError("submitit's requeue handler returned")
        if self.cluster == "slurm":
            if not wait_s:
                return  # in the signal handler: go on until rank 0's `scontrol requeue` kills this task
            time.sleep(wait_s)
        sys.exit(0)

    def requeue(self, wait_s: float) -> None:
        """After the state is saved at a step boundary (every rank): leave for the requeue."""
        self._leave(wait_s=wait_s)


class Trainer(Checkpointable):
    """The submitted callable: runs `entry(settings, run_dir, ...)` on every rank of the job (module docstring).

    Holds only picklable settings and the attempt history, which travels with every requeue (`checkpoint()`
    returns this very object, pickled by submitit)."""

    def __init__(self, method: str, entry: str, settings: dict, run_dir: str, launcher: dict):
        self.method, self.entry, self.settings = method, entry, settings
        self.run_dir, self.launcher = run_dir, launcher
        self.attempts: list[dict] = []
        self._at_boundary = False

    def __call__(self) -> dict:
        return _run_trainer(self)

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        """Called by submitit on the requeue signal, in the job. Normally the trainer has just saved a
        resumable state at a step boundary (the deferred handler); if the signal came before the training loop
        ran, the requeued job resumes from the newest interval state. Returns the trainer for resubmission."""
        if not self._at_boundary:
            self.attempts.append(
                {"attempt": len(self.attempts) + 1, "status": "preempted before the loop", "ended_at": time.time()}
            )
        self._at_boundary = False
        return DelayedSubmission(self, *args, **kwargs)


def _append_attempt(run_dir: Path, rec: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "attempts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def _result_dict(result: Any) -> dict:
    if dataclasses.is_dataclass(result):
        result = dataclasses.asdict(result)
    return json.loads(json.dumps(result, default=str)) if result is not None else {}


def _job_logging(rank: int) -> None:
    """The library's log lines into the job's stdout log (submitit's own logger keeps its handler)."""
    logger = logging.getLogger("mtp_core")
    for h in list(logger.handlers):
        if getattr(h, "_mtp_launch", False):
            logger.removeHandler(h)
    handler = logging.StreamHandler(sys.stdout)
    handler._mtp_launch = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(f"%(asctime)s [rank {rank}] %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False


def _run_trainer(self: Any) -> dict:
    """The body of `Trainer.__call__`, on every rank of the job."""
    import torch

    from ..dist import init_process_group, make_dist
    from ..loop import StopTraining

    cfg = LauncherConfig.from_dict(self.launcher)
    self._at_boundary = False
    env = _job_environment()
    rank = env.global_rank if env is not None else 0
    world = env.num_tasks if env is not None else 1
    local_rank = env.local_rank if env is not None else 0
    if env is not None and env.cluster in ("slurm", "local"):  # debug: the launcher's own logging stays
        _job_logging(rank)
    run_dir = Path(self.run_dir)
    rec: dict[str, Any] = {
        "attempt": len(self.attempts) + 1,
        "job_id": env.job_id if env is not None else None,
        "cluster": env.cluster if env is not None else None,
        "host": socket.gethostname(),
        "world_size": world,
        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
        "started_at": time.time(),
    }
    threads = cfg.threads or cfg.cpus_per_task
    if threads:
        torch.set_num_threads(int(threads))
    device = _pick_device(cfg.device, local_rank)
    rec["device"] = str(device)
    rec["gpus"] = world if device.type == "cuda" else 0
    if world > 1 or cfg.strategy in ("ddp", "fsdp"):  # a group of one too, when asked for (FSDP code paths)
        from submitit.helpers import TorchDistributedEnvironment

        if "MASTER_PORT" not in os.environ and env is not None:  # a port the site set (slurm_setup) is kept
            os.environ["MASTER_PORT"] = str(rendezvous_port(str(env.job_id)))
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        rec["backend"] = init_process_group(cfg.backend, device)
    fsdp_kw: dict[str, Any] = {}
    if cfg.strategy == "fsdp":
        fsdp_kw = {
            "replicate": cfg.fsdp_replicate,
            "param_dtype": getattr(torch, cfg.fsdp_param_dtype) if cfg.fsdp_param_dtype else None,
            "reduce_dtype": getattr(torch, cfg.fsdp_reduce_dtype) if cfg.fsdp_reduce_dtype else None,
        }
    dist_obj = make_dist(cfg.strategy, device, **fsdp_kw)
    rec["strategy"] = dist_obj.name
    watch = _PreemptionWatch(dist_obj, device, cfg.checkpoint_interval_min)
    watch.install(env)

    def finish(status: str, keep: bool = True) -> None:
        now = time.time()
        rec.update(
            status=status,
            ended_at=now,
            elapsed_s=now - rec["started_at"],
            start_step=None if watch.first_step is None else watch.first_step - 1,
            end_step=watch.last_step,
        )
        if keep:
            self.attempts.append(dict(rec))
        if rank == 0:
            _append_attempt(run_dir, rec)

    def shutdown() -> None:
        import torch.distributed as tdist

        if tdist.is_available() and tdist.is_initialized():
            tdist.destroy_process_group()

    entry = resolve(self.entry)
    try:
        result = entry(self.settings, run_dir, dist=dist_obj, device=device, callbacks=[watch])
    except StopTraining:
        finish("preempted")
        shutdown()
        self._at_boundary = True
        watch.requeue(wait_s=cfg.signal_delay_s + 120)
        raise
    except SystemExit as e:  # requeued by submitit from the signal handler, before the first step
        finish(f"requeued before the first step (exit {e.code})", keep=False)  # checkpoint() kept its record
        raise
    except BaseException as e:
        finish(f"failed: {type(e).__name__}: {e}")
        shutdown()
        raise
    finish("completed")
    shutdown()
    out = _result_dict(result)
    out.update(rank=rank, world_size=world, attempts=list(self.attempts))
    return out
