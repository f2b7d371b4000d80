"""`python -m mtp_core.train.launch`: run one training through submitit, wait for it, survive restarts.

Every training rule is a local rule whose command is this launcher (reference §3.6, design "A"):
```
python -m mtp_core.train.launch --output results/train/p1/main/train.json --method p1 \\
    --run-dir results/train/p1/main --settings '<run settings JSON or file>' --launcher '<launcher JSON or file>'
python -m mtp_core.train.launch --output ... --method p1 --config config.yaml --run main [--cluster local]
```
It builds `submitit.AutoExecutor(folder=<output>.submitit/%j, cluster=<launcher.cluster>)` (the cluster comes
from config, `slurm` | `local` | `debug`, and is never auto-detected: `AutoExecutor` would pick Slurm wherever
`srun` exists, G11), submits a `Trainer` (a `submitit.helpers.Checkpointable`) inside `clean_env()` (G6), and
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
`snakemake --unlock`, rerun (`rerun-incomplete`), and the launcher waits for the same job (G7).

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
state, the submitit log paths and the job's traceback (or the tail of its error log).

Methods are a registry (`METHODS`): name -> `module:function` entry run in the job, a settings check run before
submitting, and optionally a resolver of (config, run name) -> settings. `p1` (paper 1) and `toy` (a linear
regression on the generic loop, seconds per run: smoke tests of a cluster, failure and signal handling) are
built in; `register_method` adds more, and `--method module:function` runs any entry.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable, DelayedSubmission

from ..config import deep_merge, section_keys
from ..io import atomic_write_json, stable_hash

log = logging.getLogger(__name__)

CLUSTERS = ("slurm", "local", "debug")
# sacct states worth waiting for (re-attach); COMPLETED jobs are re-attached to read their result
REATTACH_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
                   "RESIZING", "SUSPENDED", "PREEMPTED", "COMPLETED"}
ACTIVE_STATES = REATTACH_STATES - {"COMPLETED"}
LOCAL_REQUEUE_RETURN_CODE = 144  # submitit.local.local: the controller restarts tasks that exit with it
UNKNOWN_GRACE_S = 600.0  # how long a Slurm job may stay unknown to sacct and squeue before the launcher gives up


class LaunchError(RuntimeError):
    """A training job failed or cannot be launched; the message is what the rule's log shows."""


# ------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class LauncherConfig:
    """Where and how a training runs (config section `launcher`, per-run overrides; keys = field names).

    `cluster`: slurm | local (a subprocess per task, no scheduler) | debug (in this process, pdb on error);
    never auto-detected. Resources (submitit's generic names): `nodes`, `tasks_per_node` (processes per node:
    one per GPU), `gpus_per_node`, `cpus_per_task`, `mem_gb`, `timeout_min`, `name` (job name; default
    `train-<method>-<run dir name>`). Slurm: `partition`, `account` (unset: $MTP_SLURM_PARTITION, or
    $MTP_SLURM_GPU_PARTITION for GPU jobs, and $MTP_SLURM_ACCOUNT, as in the slurm/ profile; else the
    cluster's defaults), `qos`, `constraint`, `exclude`,
    `slurm_additional_parameters` (any sbatch flag, e.g. {"requeue": true, "gpu-bind": "none"}),
    `slurm_setup` (shell lines before srun), `slurm_srun_args`. `signal_delay_s`: USR2 this long before the
    time limit (Slurm and local); `max_num_timeout`: requeues after timeouts before giving up.
    Training: `strategy` auto (DDP when > 1 process) | none | ddp | fsdp; `fsdp_replicate` (HSDP groups);
    `fsdp_param_dtype` / `fsdp_reduce_dtype` (e.g. bfloat16 / float32); `backend` auto (NCCL on CUDA, gloo on
    CPU) | gloo | nccl; `device` auto (cuda:<local rank> where CUDA is, else cpu) | cpu | cuda; `threads`:
    torch threads per process (default: cpus_per_task); `checkpoint_interval_min`: also save a resumable state
    every so many minutes (0: only `train.checkpoint_every` and on the requeue signal).
    Launcher: `poll_s` (state queries while waiting), `progress_s` (a progress line in the log).
    """

    cluster: str = "local"
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    timeout_min: int = 240
    name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    slurm_additional_parameters: dict[str, Any] = field(default_factory=dict)
    slurm_setup: tuple[str, ...] = ()
    slurm_srun_args: tuple[str, ...] = ()
    signal_delay_s: int = 90
    max_num_timeout: int = 3
    strategy: str = "auto"
    fsdp_replicate: int = 1
    fsdp_param_dtype: str | None = None
    fsdp_reduce_dtype: str | None = None
    backend: str = "auto"
    device: str = "auto"
    threads: int | None = None
    checkpoint_interval_min: float = 0.0
    poll_s: float = 30.0
    progress_s: float = 60.0

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> None:
            raise ValueError(f"launcher.{key}: {why}")

        if self.cluster not in CLUSTERS:
            bad("cluster", f"{self.cluster!r} is not one of {', '.join(CLUSTERS)} (never auto-detected)")
        for key in ("nodes", "tasks_per_node", "max_num_timeout", "fsdp_replicate"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < (0 if key == "max_num_timeout" else 1):
                bad(key, f"must be a positive integer, got {getattr(self, key)!r}")
        if not isinstance(self.timeout_min, int) or self.timeout_min < 1:
            bad("timeout_min", f"must be a positive integer (minutes), got {self.timeout_min!r}")
        if self.gpus_per_node < 0:
            bad("gpus_per_node", "must be >= 0")
        if self.cluster == "local" and self.nodes != 1:
            bad("nodes", "the local cluster has one node")
        if self.cluster == "debug" and self.nodes * self.tasks_per_node != 1:
            bad("tasks_per_node", "the debug cluster runs one process (in the launcher)")
        if self.strategy not in ("auto", "none", "ddp", "fsdp"):
            bad("strategy", f"{self.strategy!r} is not one of auto, none, ddp, fsdp")
        if self.strategy == "none" and self.num_tasks > 1:
            bad("strategy", f"'none' trains in one process, but nodes x tasks_per_node = {self.num_tasks}")
        if self.backend not in ("auto", "gloo", "nccl"):
            bad("backend", f"{self.backend!r} is not one of auto, gloo, nccl")
        if self.device not in ("auto", "cpu", "cuda"):
            bad("device", f"{self.device!r} is not one of auto, cpu, cuda")
        for key in ("fsdp_param_dtype", "fsdp_reduce_dtype"):
            if getattr(self, key) not in (None, "bfloat16", "float16", "float32"):
                bad(key, f"{getattr(self, key)!r} is not one of bfloat16, float16, float32")
        if not isinstance(self.slurm_additional_parameters, dict):
            bad("slurm_additional_parameters", "must be a mapping of sbatch flag -> value")
        object.__setattr__(self, "slurm_setup", tuple(self.slurm_setup))
        object.__setattr__(self, "slurm_srun_args", tuple(self.slurm_srun_args))

    @classmethod
    def from_dict(cls, d: dict | None) -> LauncherConfig:
        return cls(**section_keys(cls, d, "launcher"))

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["slurm_setup"], d["slurm_srun_args"] = list(self.slurm_setup), list(self.slurm_srun_args)
        return d

    @property
    def num_tasks(self) -> int:
        return self.nodes * self.tasks_per_node


# ------------------------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Method:
    """A trainable method: `entry(settings, run_dir, *, dist, device, callbacks)` runs in the job (every rank)
    and returns a `TrainResult` or a dict; `check(settings) -> settings` validates and normalises the settings
    in the launcher, before anything is submitted (paths made absolute); `from_config(config, run) ->
    (settings, launcher overrides)` resolves a run named in a config file. Each is a `module:function` path."""

    name: str
    entry: str
    check: str | None = None
    from_config: str | None = None
    world_size_check: bool = True  # the settings hold a `train` section whose global batch must split


METHODS: dict[str, Method] = {}


def register_method(name: str, entry: str, check: str | None = None, from_config: str | None = None) -> Method:
    METHODS[name] = Method(name, entry, check, from_config)
    return METHODS[name]


def _resolve(path: str) -> Callable[..., Any]:
    module, sep, attr = path.partition(":")
    if not sep:
        raise ValueError(f"{path!r} is not of the form module:function")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def get_method(name: str) -> Method:
    """A registered method, or `module:function` (an entry without check or config resolver)."""
    if name in METHODS:
        return METHODS[name]
    if ":" in name:
        return Method(name, name)
    raise ValueError(f"unknown training method {name!r} (registered: {', '.join(sorted(METHODS))}; or module:function)")


def _abs(path: str | None) -> str | None:
    return None if path is None else str(Path(path).resolve())


def _known_keys(settings: dict, allowed: Sequence[str], what: str) -> None:
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise ValueError(f"{what}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")


P1_KEYS = ("model", "base_dir", "base_stamp", "data", "train", "p1", "mask_seed", "on_bad_row")
SFT_KEYS = ("model", "base_dir", "base_stamp", "data", "train", "sft", "on_bad_row")


def _check_model_data_train(settings: dict, allowed: Sequence[str], what: str) -> dict:
    """The settings every fine-tuning of a declared model has: `model` (a model spec as in `models:`, with
    `name`), `base_dir` (its prepared checkpoint, for gguf/tiny/finetuned sources), `base_stamp` (for a
    fine-tuned base: what trained it, so a retrained base supersedes old state; `model_plan.base_stamp`), `data`
    (train JSONL with query/response), `train` (TrainConfig keys), `on_bad_row`. Paths come back absolute."""
    from .config import TrainConfig

    _known_keys(settings, allowed, what)
    for key in ("model", "data", "train"):
        if key not in settings:
            raise ValueError(f"{what}: {key!r} is required")
    if not isinstance(settings["model"], dict) or "source" not in settings["model"]:
        raise ValueError(f"{what}.model: a model spec with `source` (as declared under `models:`)")
    TrainConfig.from_dict(settings["train"])
    out = dict(settings)
    out["data"] = _abs(settings["data"])
    if not Path(out["data"]).is_file():
        raise ValueError(f"{what}.data: {settings['data']} does not exist")
    out["base_dir"] = _abs(settings.get("base_dir"))
    if out["base_dir"] is not None and not Path(out["base_dir"]).is_dir():
        raise ValueError(f"{what}.base_dir: {settings['base_dir']} is not a directory")
    if settings["model"]["source"] == "local":
        out["model"] = {**settings["model"], "path": _abs(settings["model"]["path"])}
    return out


def p1_check(settings: dict) -> dict:
    """Paper 1 run settings: those of `_check_model_data_train`, `p1` (P1Config keys) and `mask_seed`."""
    from .p1 import P1Config

    out = _check_model_data_train(settings, P1_KEYS, "p1 settings")
    P1Config.from_dict(settings.get("p1"))
    return out


def _load_model_and_rows(settings: dict) -> tuple[Any, list[dict]]:
    """The base model and the (query, response) train rows of checked settings (`_check_model_data_train`)."""
    from ..models import load_model
    from .p1 import read_rows

    loaded = load_model(settings["model"], base_dir=settings.get("base_dir"))
    return loaded, read_rows(settings["data"], settings.get("on_bad_row", "error"))


def p1_entry(settings: dict, run_dir: Path, *, dist: Any, device: Any, callbacks: Sequence[Any] = ()) -> Any:
    """Load the base model and rows, then `train_p1` (resumes from `run_dir/checkpoints`)."""
    from .p1 import train_p1

    loaded, rows = _load_model_and_rows(settings)
    return train_p1(loaded, rows, settings.get("p1") or {}, settings["train"], run_dir, device=device,
                    mask_seed=int(settings.get("mask_seed", 0)), dist=dist, callbacks=callbacks)


def p1_from_config(config: dict, run: str) -> tuple[dict, dict]:
    """Settings of run `run` of `papers.p1` and its launcher settings (`mtp_core.p1_plan.run_settings` and
    `launcher_settings`: top-level `launcher` < `papers.p1.launcher` < `runs.<run>.launcher`)."""
    from .. import p1_plan

    return p1_plan.run_settings(config, run), p1_plan.launcher_settings(config, run)


def sft_check(settings: dict) -> dict:
    """Fine-tuning settings (`source: finetuned` models): those of `_check_model_data_train` and `sft`
    (SFTConfig keys)."""
    from .sft import SFTConfig

    out = _check_model_data_train(settings, SFT_KEYS, "sft settings")
    SFTConfig.from_dict(settings.get("sft"))
    return out


def sft_entry(settings: dict, run_dir: Path, *, dist: Any, device: Any, callbacks: Sequence[Any] = ()) -> Any:
    """Load the base model and rows, then `train_sft` (resumes from `run_dir/checkpoints`)."""
    from .sft import train_sft

    loaded, rows = _load_model_and_rows(settings)
    return train_sft(loaded, rows, settings.get("sft") or {}, settings["train"], run_dir, device=device, dist=dist,
                     callbacks=callbacks)


def sft_from_config(config: dict, name: str) -> tuple[dict, dict]:
    """Settings and launcher settings of fine-tuned model `name` (`mtp_core.model_plan`)."""
    from .. import model_plan

    return model_plan.finetune_settings(config, name), model_plan.launcher_settings(config, name)


# -------------------------------------------------------------------------- toy method (smoke tests)

TOY_KEYS = ("train", "rows", "dim", "seed", "fail_at_step", "step_sleep_s", "fail_on_rank", "startup_sleep_s")


class _ToyData:
    def __init__(self, rows: int, dim: int, seed: int):
        import torch

        from .loop import ShuffledOrder

        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(rows, dim, generator=g)
        self.y = self.x @ torch.randn(dim, generator=g) + 0.1 * torch.randn(rows, generator=g)
        self.order = ShuffledOrder(rows, seed=seed)

    def micro_batch(self, spec: Any) -> Any:
        import torch

        idx = torch.from_numpy(self.order.indices(spec.start, spec.size))
        return self.x[idx], self.y[idx]


class _ToyStep:
    metric_names = ["mse"]

    def __init__(self, fail_at_step: int | None, step_sleep_s: float, fail_on_rank: int | None):
        self.fail_at_step, self.step_sleep_s, self.fail_on_rank = fail_at_step, step_sleep_s, fail_on_rank

    def __call__(self, model: Any, batch: Any, ctx: Any) -> Any:
        from .loop import StepOutput

        if ctx.micro_index == 0:
            if self.fail_at_step is not None and ctx.step + 1 == self.fail_at_step and \
                    self.fail_on_rank in (None, ctx.rank):
                raise RuntimeError(f"toy: failing on purpose at step {ctx.step + 1} (rank {ctx.rank})")
            if self.step_sleep_s:
                time.sleep(self.step_sleep_s)
        x, y = batch
        err = (model(x).squeeze(-1) - y) ** 2
        return StepOutput(loss=err.mean(), weight=float(len(y)), metrics={"mse": (err.sum().detach(), len(y))},
                          tokens=len(y))


def _save_state_dict(model: Any, path: Path) -> None:
    import torch

    from ..io import atomic_path

    path.mkdir(parents=True, exist_ok=True)
    with atomic_path(path / "model.pt") as tmp:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)


def toy_check(settings: dict) -> dict:
    """`toy` settings: `train` (TrainConfig keys), `rows`, `dim`, `seed`; for tests of failure and signal
    handling: `fail_at_step` (raise at that step), `fail_on_rank`, `step_sleep_s` (sleep per step),
    `startup_sleep_s` (sleep before training when no checkpoint exists yet: a slow model load)."""
    from .config import TrainConfig

    _known_keys(settings, TOY_KEYS, "toy settings")
    if "train" not in settings:
        raise ValueError("toy settings: 'train' is required")
    TrainConfig.from_dict(settings["train"])
    return dict(settings)


def toy_entry(settings: dict, run_dir: Path, *, dist: Any, device: Any, callbacks: Sequence[Any] = ()) -> Any:
    """A linear regression (dim -> 1) trained by the generic loop; the final weights go to `model/model.pt`."""
    import torch

    from .config import TrainConfig
    from .loop import train

    dim, seed = int(settings.get("dim", 8)), int(settings.get("seed", 0))
    cpu_rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    torch.random.set_rng_state(cpu_rng)
    step = _ToyStep(settings.get("fail_at_step"), float(settings.get("step_sleep_s", 0.0)), settings.get("fail_on_rank"))
    from .checkpoint import latest_checkpoint

    if settings.get("startup_sleep_s") and latest_checkpoint(Path(run_dir) / "checkpoints") is None:
        print("toy: loading (startup_sleep_s)", flush=True)
        time.sleep(float(settings["startup_sleep_s"]))
    return train(step, model, _ToyData(int(settings.get("rows", 64)), dim, seed), TrainConfig.from_dict(settings["train"]),
                 run_dir, dist=dist, device=device, callbacks=callbacks, export_fn=_save_state_dict)


register_method("p1", "mtp_core.train.launch:p1_entry", "mtp_core.train.launch:p1_check",
                "mtp_core.train.launch:p1_from_config")
register_method("sft", "mtp_core.train.launch:sft_entry", "mtp_core.train.launch:sft_check",
                "mtp_core.train.launch:sft_from_config")
register_method("toy", "mtp_core.train.launch:toy_entry", "mtp_core.train.launch:toy_check")


# ----------------------------------------------------------------------------------- the job: trainer


def _job_environment() -> Any:
    """submitit's JobEnvironment when running inside a submitit job, else None."""
    try:
        from submitit import JobEnvironment

        return JobEnvironment()
    except RuntimeError:
        return None


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
            print(f"mtp-launch: caught {signal.Signals(signum).name} before training started: requeueing",
                  file=sys.stderr, flush=True)
            self._leave(signum)
        self.signalled = True
        print(f"mtp-launch: caught {signal.Signals(signum).name}: checkpointing at the end of this step",
              file=sys.stderr, flush=True)

    def __call__(self, step: int, row: dict) -> Any:
        import torch

        from .loop import SAVE, StopTraining

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
            self.attempts.append({"attempt": len(self.attempts) + 1, "status": "preempted before the loop",
                                  "ended_at": time.time()})
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

    from .dist import init_process_group, make_dist
    from .loop import StopTraining

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
        "attempt": len(self.attempts) + 1, "job_id": env.job_id if env is not None else None,
        "cluster": env.cluster if env is not None else None, "host": socket.gethostname(), "world_size": world,
        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"), "started_at": time.time(),
    }
    threads = cfg.threads or cfg.cpus_per_task
    if threads:
        torch.set_num_threads(int(threads))
    device = _pick_device(cfg.device, local_rank)
    rec["device"] = str(device)
    rec["gpus"] = world if device.type == "cuda" else 0
    if world > 1 or cfg.strategy in ("ddp", "fsdp"):  # a group of one too, when asked for (FSDP code paths)
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        rec["backend"] = init_process_group(cfg.backend, device)
    fsdp_kw: dict[str, Any] = {}
    if cfg.strategy == "fsdp":
        fsdp_kw = {"replicate": cfg.fsdp_replicate,
                   "param_dtype": getattr(torch, cfg.fsdp_param_dtype) if cfg.fsdp_param_dtype else None,
                   "reduce_dtype": getattr(torch, cfg.fsdp_reduce_dtype) if cfg.fsdp_reduce_dtype else None}
    dist_obj = make_dist(cfg.strategy, device, **fsdp_kw)
    rec["strategy"] = dist_obj.name
    watch = _PreemptionWatch(dist_obj, device, cfg.checkpoint_interval_min)
    watch.install(env)

    def finish(status: str, keep: bool = True) -> None:
        now = time.time()
        rec.update(status=status, ended_at=now, elapsed_s=now - rec["started_at"],
                   start_step=None if watch.first_step is None else watch.first_step - 1, end_step=watch.last_step)
        if keep:
            self.attempts.append(dict(rec))
        if rank == 0:
            _append_attempt(run_dir, rec)

    def shutdown() -> None:
        import torch.distributed as tdist

        if tdist.is_available() and tdist.is_initialized():
            tdist.destroy_process_group()

    entry = _resolve(self.entry)
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


# ---------------------------------------------------------------------------------- the launcher side


@dataclass
class _Paths:
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


def _say(msg: str) -> None:
    print(f"mtp-launch: {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _output_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `<output>.lock` (released by the kernel if the launcher dies)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            _say(f"another launcher ({f.read().strip() or 'unknown pid'}) waits for this output; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:  # a filesystem without locks: go on unprotected
            _say(f"cannot lock {path} ({e}); going on without the lock")
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        yield


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _local_controller_alive(pid: str, folder: str) -> bool:
    """Whether process `pid` is the submitit local controller of `folder` (not a reused pid, not a zombie)."""
    try:
        cmd = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    return b"submitit.local._local" in cmd and folder.encode() in cmd


def _children(pid: int) -> list[int]:
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


def _job_object(info: dict) -> Any:
    import submitit

    folder, job_id, tasks = info["folder"], str(info["job_id"]), list(range(int(info.get("tasks", 1))))
    if info["cluster"] == "slurm":
        return submitit.SlurmJob(folder=folder, job_id=job_id, tasks=tasks)
    job = submitit.LocalJob(folder=folder, job_id=job_id, tasks=tasks)
    for j in _task_jobs(job):  # a dead local job has no result to wait for on a slow filesystem
        j._results_timeout_s = 2
    return job


def _task_jobs(job: Any) -> list[Any]:
    return list(job._sub_jobs) or [job]


def _results_present(job: Any) -> bool:
    return all(j.paths.result_pickle.exists() for j in _task_jobs(job))


def _outcome(job: Any) -> str:
    """success | error | missing, from the result pickles of every task."""
    from submitit.core import utils

    outcomes = []
    for j in _task_jobs(job):
        if not j.paths.result_pickle.exists():
            return "missing"
        try:
            outcomes.append(utils.pickle_load(j.paths.result_pickle)[0])
        except Exception:  # noqa: BLE001 - unreadable: treat as failed
            return "error"
    return "success" if all(o == "success" for o in outcomes) else "error"


def _lost_products(job: Any) -> str | None:
    """The final model directory a finished job reported when it no longer exists (deleted since), else None."""
    from submitit.core import utils

    with contextlib.suppress(Exception):
        final = utils.pickle_load(_task_jobs(job)[0].paths.result_pickle)[1].get("final_dir")
        if final and not Path(final).exists():
            return final
    return None


def _slurm_state(job: Any) -> str:
    state = job.watcher.get_state(job.job_id, mode="force").split()[0].upper()
    if state == "UNKNOWN":  # sacct may not know a job submitted a moment ago
        with contextlib.suppress(Exception):
            out = subprocess.run(["squeue", "-h", "-j", str(job.job_id), "-o", "%T"], capture_output=True,
                                 text=True, timeout=30).stdout.split()
            if out:
                state = out[0].upper()
    return state


def _job_state(job: Any, info: dict) -> str:
    if info["cluster"] == "slurm":
        return _slurm_state(job)
    process = getattr(job, "_process", None)
    if process is not None:
        return "RUNNING" if process.poll() is None else "FINISHED"
    return "RUNNING" if _local_controller_alive(str(job.job_id), info["folder"]) else "FINISHED"


def _try_reattach(info: dict, cfg: LauncherConfig, settings_hash: str) -> Any | None:
    """The job of a previous launcher worth waiting for (module docstring), or None (submit a new one)."""
    if info.get("cluster") != cfg.cluster:
        _say(f"job {info.get('job_id')} ran on cluster {info.get('cluster')!r}, now {cfg.cluster!r}: new submission")
        return None
    if cfg.cluster == "debug":
        return None
    job = _job_object(info)
    state = _job_state(job, info)
    finished = _results_present(job)
    active = not finished and (state in ACTIVE_STATES or (cfg.cluster == "local" and state == "RUNNING"))
    if info.get("settings_hash") != settings_hash:
        if active:
            raise LaunchError(
                f"job {job.job_id} ({cfg.cluster}, {state}) was submitted for this output with other settings "
                f"(hash {info.get('settings_hash')} != {settings_hash}); cancel it"
                f"{f' (scancel {job.job_id})' if cfg.cluster == 'slurm' else f' (kill {job.job_id})'} or restore them")
        _say(f"previous job {job.job_id} had other settings: new submission")
        return None
    if finished:
        if _outcome(job) == "success":
            gone = _lost_products(job)
            if gone:
                _say(f"job {job.job_id} finished, but {gone} is gone: new submission (resumes from the newest "
                     "checkpoint)")
                return None
            _say(f"re-attaching to job {job.job_id} ({state}): its result is there")
            return job
        _say(f"previous job {job.job_id} failed ({state}): new submission (resumes from the newest checkpoint)")
        return None
    if active:
        _say(f"re-attaching to job {job.job_id} ({state}) instead of submitting again")
        return job
    _say(f"previous job {job.job_id} is gone ({state}, no result): new submission (resumes from the newest checkpoint)")
    return None


def _executor(cfg: LauncherConfig, paths: _Paths, name: str) -> Any:
    import submitit

    kwargs: dict[str, Any] = {}
    if cfg.cluster == "slurm":
        kwargs["slurm_max_num_timeout"] = cfg.max_num_timeout
    elif cfg.cluster == "local":
        kwargs["local_max_num_timeout"] = cfg.max_num_timeout
    ex = submitit.AutoExecutor(folder=paths.folder, cluster=cfg.cluster, **kwargs)
    params: dict[str, Any] = {"name": name, "timeout_min": cfg.timeout_min, "nodes": cfg.nodes,
                              "tasks_per_node": cfg.tasks_per_node, "gpus_per_node": cfg.gpus_per_node,
                              "cpus_per_task": cfg.cpus_per_task, "mem_gb": cfg.mem_gb}
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
        if cfg.slurm_srun_args:
            params["slurm_srun_args"] = list(cfg.slurm_srun_args)
    if cfg.cluster == "debug":
        params = {}
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    if cfg.cluster == "local":  # not reachable through AutoExecutor's parameter check (submitit 1.5.4)
        ex._executor.update_parameters(signal_delay_s=cfg.signal_delay_s)
    return ex


def _submit(cfg: LauncherConfig, paths: _Paths, trainer: Any, name: str, record: dict) -> Any:
    from submitit.helpers import clean_env

    ex = _executor(cfg, paths, name)
    try:
        with clean_env():  # G6: no SLURM_*/SUBMITIT_*/torch.distributed variables leak into the new job
            job = ex.submit(trainer)
    except Exception as e:  # noqa: BLE001 - sbatch's own message is the useful part
        raise LaunchError(f"submitting the training to {cfg.cluster} failed: {type(e).__name__}: {e}") from None
    if cfg.cluster == "local":
        for j in _task_jobs(job):
            j._results_timeout_s = 2
    now = time.time()
    info = _read_json(paths.job_json) or {}
    submissions = list(info.get("submissions", []))
    submissions.append({"job_id": str(job.job_id), "cluster": cfg.cluster, "submitted_at": now})
    record.update(job_id=str(job.job_id), cluster=cfg.cluster, folder=str(paths.folder), tasks=cfg.num_tasks,
                  submitted_at=now, submissions=submissions)
    atomic_write_json(paths.job_json, record)
    _say(f"submitted job {job.job_id} ({cfg.cluster}, {cfg.nodes} node(s) x {cfg.tasks_per_node} task(s), "
         f"{cfg.gpus_per_node} GPU(s) per node); logs: {job.paths.folder}")
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


def _wait(job: Any, info: dict, cfg: LauncherConfig, paths: _Paths, max_steps: int | None) -> str:
    """Block until every task's result is there or the job is over; returns the last state seen."""
    if info["cluster"] == "debug":
        return "DEBUG"
    start = last_poll = last_progress = time.monotonic()
    state = _job_state(job, info)
    final_since: float | None = None
    unknown_since: float | None = None
    while True:
        if _results_present(job):
            return state
        now = time.monotonic()
        if now - last_poll >= cfg.poll_s or info["cluster"] == "local":
            state = _job_state(job, info)
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
        if over:  # finished: give the filesystem a moment to show the result pickles (G15)
            final_since = final_since or now
            if now - final_since > (30.0 if info["cluster"] == "slurm" else 3.0):
                return state
        else:
            final_since = None
        if now - last_progress >= cfg.progress_s:
            last_progress = now
            steps = f"step {_last_step(paths.run_dir)}/{max_steps}" if max_steps else f"step {_last_step(paths.run_dir)}"
            _say(f"job {job.job_id}: {state}, {steps}, waited {now - start:.0f} s")
        time.sleep(0.5 if info["cluster"] == "local" else 1.0)


def _settle(job: Any, info: dict, state: str, limit_s: float = 30.0) -> str:
    """The state once Slurm has closed the allocation (so that sacct's elapsed time is final), or the last one
    seen after `limit_s`."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            state = _job_state(job, info)
        if state not in ACTIVE_STATES and state != "UNKNOWN":
            break
        time.sleep(1.0)
    return state


def _sacct_rows(job_id: str) -> list[dict]:
    fmt = ["JobIDRaw", "State", "ElapsedRaw", "AllocTRES", "NNodes", "Submit", "Start", "End", "NodeList"]
    try:
        out = subprocess.run(["sacct", "-j", str(job_id), "-X", "-D", "-P", "-n", f"--format={','.join(fmt)}"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return [dict(zip(fmt, line.split("|"))) for line in out.stdout.splitlines() if line.strip()]


def _gpus_of(tres: str) -> int | None:
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            return int(value)
    return None


def record_cost(paths: _Paths, job: Any, info: dict, cfg: LauncherConfig, state: str, waited_s: float) -> dict:
    """Write `<output>.cost.json`: this job's entry (replacing an older one of the same id) and the totals."""
    job_id = str(job.job_id)
    attempts = [a for a in (json.loads(line) for line in _lines(paths.run_dir / "attempts.jsonl"))
                if str(a.get("job_id")) == job_id]
    gpus = cfg.nodes * cfg.gpus_per_node
    entry: dict[str, Any] = {
        "job_id": job_id, "cluster": info["cluster"], "state": state, "submitted_at": info.get("submitted_at"),
        "launcher_waited_s": waited_s, "nodes": cfg.nodes, "tasks": cfg.num_tasks, "gpus": gpus,
        "attempts": attempts, "requeues": max(0, len(attempts) - 1),
        "elapsed_s": sum(float(a.get("elapsed_s") or 0) for a in attempts),
    }
    if info["cluster"] == "slurm":
        rows = _sacct_rows(job_id)
        entry["sacct"] = rows
        with contextlib.suppress(Exception):
            entry["info"] = job.get_info()
        if rows:
            entry["elapsed_s"] = float(sum(int(r["ElapsedRaw"] or 0) for r in rows))
            alloc = [g for g in (_gpus_of(r["AllocTRES"]) for r in rows) if g is not None]
            if alloc:
                entry["gpus"] = max(alloc)
            entry["requeues"] = max(0, len(rows) - 1)
    entry["gpu_hours"] = entry["elapsed_s"] * entry["gpus"] / 3600.0
    cost = _read_json(paths.cost_json) or {}
    jobs = [j for j in cost.get("jobs", []) if str(j.get("job_id")) != job_id] + [entry]
    cost = {"output": str(paths.output), "run_dir": str(paths.run_dir), "jobs": jobs,
            "total": {"jobs": len(jobs), "elapsed_s": sum(j["elapsed_s"] for j in jobs),
                      "gpu_hours": sum(j["gpu_hours"] for j in jobs),
                      "requeues": sum(j["requeues"] for j in jobs)}}
    atomic_write_json(paths.cost_json, cost)
    return cost


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _failure_message(job: Any, info: dict, state: str, error: BaseException) -> str:
    head = [f"training job {job.job_id} ({info['cluster']}) failed (state {state})"]
    logs = [f"  {p}" for j in _task_jobs(job) for p in (j.paths.stderr, j.paths.stdout)]
    head.append("submitit logs:\n" + "\n".join(logs))
    body = str(error)
    if len(body) > 20000:
        body = body[:4000] + "\n[...]\n" + body[-12000:]
    head.append(f"--- {type(error).__name__} from the job ---\n{body}")
    t0 = _task_jobs(job)[0]
    if "Traceback" not in body:
        tail = _tail(t0.paths.stderr)
        if tail:
            head.append(f"--- last lines of {t0.paths.stderr} ---\n{tail}")
    return "\n".join(head)


@contextlib.contextmanager
def _no_pdb() -> Iterator[None]:
    """The debug executor opens pdb on an exception; without a terminal (Snakemake, tests) that would hang or
    fail, so it is skipped there."""
    import pdb

    if sys.stdin is not None and sys.stdin.isatty():
        yield
        return
    orig = pdb.post_mortem
    pdb.post_mortem = lambda *a, **k: _say("debug cluster: pdb skipped (stdin is not a terminal)")
    try:
        yield
    finally:
        pdb.post_mortem = orig


STAMP = "run_settings.json"
# train keys that do not change the optimisation steps; resuming across a change of these is the same training
UNSTAMPED_TRAIN_KEYS = ("threads", "progress", "log_every", "checkpoint_every", "keep_last", "save_steps", "resume",
                        "fused")


def trajectory_hash(method: str, entry: str, settings: dict) -> str:
    """Hash of what decides the training's steps: method, entry and settings, without `UNSTAMPED_TRAIN_KEYS` and
    (constant schedule) without `max_steps`, since the first N steps of a constant schedule do not depend on it."""
    train = settings.get("train")
    if isinstance(train, dict):
        from .config import TrainConfig

        constant = TrainConfig.from_dict(train).schedule == "constant"  # the schedule as the loop will run it
        drop = set(UNSTAMPED_TRAIN_KEYS) | ({"max_steps"} if constant else set())
        settings = {**settings, "train": {k: v for k, v in train.items() if k not in drop}}
    return stable_hash({"method": method, "entry": entry, "settings": settings})


def _supersede_stale_state(paths: _Paths, stamp: str) -> None:
    """Before a new submission: move state trained with other settings (or of unknown settings) out of the way,
    so it is never resumed (module docstring), and stamp the run directory with `stamp`."""
    run_dir = paths.run_dir
    old = _read_json(run_dir / STAMP) or {}
    if old.get("hash") != stamp:
        launcher_files = paths.output.name if paths.output.parent == run_dir else None
        stale = [p for p in run_dir.iterdir() if p.name not in (STAMP, "superseded")
                 and not (launcher_files and p.name.startswith(launcher_files))]
        if stale and (old or (run_dir / "checkpoints").is_dir()):
            dest = run_dir / "superseded" / f"{time.strftime('%Y%m%dT%H%M%S')}-{old.get('hash', 'unstamped')}"
            dest.mkdir(parents=True)
            for p in stale:
                p.rename(dest / p.name)
            _say(f"{run_dir} held training state of other settings ({old.get('hash', 'no stamp')} != {stamp}): "
                 f"moved {len(stale)} entries to {dest}; training starts from step 0")
    atomic_write_json(run_dir / STAMP, {"hash": stamp, "written_at": time.time()})


def launch(output: str | os.PathLike, method: str, settings: dict, launcher: LauncherConfig | dict | None = None,
           run_dir: str | os.PathLike | None = None, *, reattach: bool = True) -> dict:
    """Submit (or re-attach to) the training of `settings` with `method`, wait, and write `output` on success.

    Returns the output record; raises `LaunchError` (message: job, state, log paths, traceback) on failure.
    """
    cfg = launcher if isinstance(launcher, LauncherConfig) else LauncherConfig.from_dict(launcher)
    m = get_method(method)
    output = Path(output).resolve()
    paths = _Paths(output, Path(run_dir).resolve() if run_dir is not None else output.parent)
    if m.check:
        settings = _resolve(m.check)(settings)
    max_steps = None
    if isinstance(settings.get("train"), dict):
        from .config import TrainConfig

        tc = TrainConfig.from_dict(settings["train"])
        tc.accumulation(cfg.num_tasks)  # the global batch must split over the processes: fail before submitting
        max_steps = tc.max_steps
    settings_hash = stable_hash({"method": method, "entry": m.entry, "settings": settings,
                                 "world": cfg.num_tasks, "strategy": cfg.strategy})
    name = cfg.name or f"train-{m.name.replace(':', '.')}-{paths.run_dir.name}"
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    if output.exists():
        output.unlink()  # written again only on success
    t0 = time.monotonic()
    with _output_lock(paths.lock):
        info = _read_json(paths.job_json) if reattach else None
        job = _try_reattach(info, cfg, settings_hash) if info and info.get("job_id") else None
        if job is None:
            _supersede_stale_state(paths, trajectory_hash(method, m.entry, settings))
            trainer = Trainer(m.name, m.entry, settings, str(paths.run_dir), cfg.as_dict())
            record = {"output": str(output), "method": m.name, "run_dir": str(paths.run_dir),
                      "settings_hash": settings_hash, "launcher": cfg.as_dict()}
            job = _submit(cfg, paths, trainer, name, record)
            info = record
        state = "UNKNOWN"
        try:
            with _no_pdb():
                state = _wait(job, info, cfg, paths, max_steps)
                results = job.results()
        except Exception as e:  # noqa: BLE001 - every failure of the job becomes one clear message
            if info["cluster"] == "slurm":
                state = _settle(job, info, state)
            elif info["cluster"] == "local":
                with contextlib.suppress(Exception):
                    state = _job_state(job, info)
            record_cost(paths, job, info, cfg, state, time.monotonic() - t0)
            raise LaunchError(_failure_message(job, info, state, e)) from None
        if info["cluster"] == "slurm":  # the results are written before the allocation ends: wait for sacct
            state = _settle(job, info, state)
        elif info["cluster"] == "local":
            with contextlib.suppress(Exception):
                state = _job_state(job, info)
        cost = record_cost(paths, job, info, cfg, "COMPLETED" if state in ("FINISHED", "DEBUG") else state,
                           time.monotonic() - t0)
        main = results[0] if results else {}
        out = {"method": m.name, "run_dir": str(paths.run_dir), "final_dir": main.get("final_dir"),
               "steps": main.get("steps"), "resumed_from": main.get("resumed_from"),
               "job_id": str(job.job_id), "cluster": info["cluster"], "settings_hash": settings_hash,
               "attempts": main.get("attempts", []),  # once: `result` and `cost` below leave them out
               "result": {k: v for k, v in main.items() if k != "attempts"},
               "cost": {k: v for k, v in cost["jobs"][-1].items() if k != "attempts"}}
        atomic_write_json(output, out)
    _say(f"job {job.job_id} done: {out['steps']} steps, {len(out['attempts'])} attempt(s); wrote {output}")
    return out


def interrupt_job(output: str | os.PathLike, timeout: bool = False) -> str:
    """Send the job of `output` what a preemption (SIGTERM then USR2) or a timeout (USR2) sends: Slurm through
    submitit's `job._interrupt()`; local to the task processes (LocalJob._interrupt would kill the controller)."""
    paths = _Paths(Path(output).resolve(), Path("."))
    info = _read_json(paths.job_json)
    if not info:
        raise LaunchError(f"no job recorded for {output} ({paths.job_json} missing)")
    job = _job_object(info)
    if info["cluster"] == "slurm":
        job._interrupt(timeout=timeout)
    elif info["cluster"] == "local":
        from submitit.local.local import LocalJobEnvironment

        tasks = _children(int(info["job_id"]))
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


# ----------------------------------------------------------------------------------------------- CLI


def _json_or_file(text: str, what: str) -> dict:
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise SystemExit(f"--{what}: invalid JSON: {e}") from None
    else:
        path = Path(text)
        if not path.is_file():
            raise SystemExit(f"--{what}: {text} is neither a JSON object nor a file")
        import yaml

        value = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
    if not isinstance(value, dict):
        raise SystemExit(f"--{what}: expected a mapping")
    return value




def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mtp_core.train.launch",
        description="Submit a training run with submitit (slurm | local | debug), wait, re-attach after restarts; "
                    "writes OUTPUT only on success (module docstring of mtp_core.train.launch).")
    p.add_argument("--output", required=True, help="the rule's declared output (a JSON record, written on success)")
    p.add_argument("--method", default="p1", help=f"registered method ({', '.join(sorted(METHODS))}) or module:function")
    p.add_argument("--run-dir", help="the run's directory (checkpoints, curves, model); default: the output's directory")
    src = p.add_argument_group("run settings (one of)")
    src.add_argument("--settings", help="the run's settings: a JSON object or a .json/.yaml file")
    src.add_argument("--config", help="a pipeline config file (with --run): the method resolves the run's settings")
    src.add_argument("--run", help="run name in --config")
    la = p.add_argument_group("launcher (config papers.<p>.launcher < runs.<run>.launcher < --launcher < flags)")
    la.add_argument("--launcher", help="launcher settings: a JSON object or a .json/.yaml file")
    la.add_argument("--cluster", choices=CLUSTERS)
    for flag, typ in (("nodes", int), ("tasks-per-node", int), ("gpus-per-node", int), ("cpus-per-task", int),
                      ("mem-gb", float), ("timeout-min", int), ("partition", str), ("account", str),
                      ("strategy", str)):
        la.add_argument(f"--{flag}", type=typ)
    la.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="any launcher key (value parsed as JSON where it parses)")
    p.add_argument("--no-reattach", action="store_true", help="always submit a new job")
    p.add_argument("--interrupt", choices=("preempt", "timeout"),
                   help="send the running job of OUTPUT a preemption or timeout signal, then exit (tests, drills)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved settings and launcher, submit nothing")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.interrupt:
        try:
            job_id = interrupt_job(args.output, timeout=args.interrupt == "timeout")
        except LaunchError as e:
            _say(str(e))
            return 1
        _say(f"sent {args.interrupt} signal(s) to job {job_id}")
        return 0
    launcher: dict[str, Any] = {}
    try:
        if args.config:
            if not args.run:
                raise SystemExit("--config needs --run")
            from ..config import load_config

            config = load_config(args.config)  # validated, defaults filled (as Snakemake does)
            m = get_method(args.method)
            if not m.from_config:
                raise SystemExit(f"method {args.method!r} cannot read its settings from a config file: use --settings")
            settings, launcher = _resolve(m.from_config)(config, args.run)
            if args.settings:
                settings = deep_merge(settings, _json_or_file(args.settings, "settings"))
        elif args.settings:
            settings = _json_or_file(args.settings, "settings")
        else:
            raise SystemExit("give --settings, or --config and --run")
        if args.launcher:
            launcher = deep_merge(launcher, _json_or_file(args.launcher, "launcher"))
        for flag in ("cluster", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem_gb",
                     "timeout_min", "partition", "account", "strategy"):
            if getattr(args, flag) is not None:
                launcher[flag] = getattr(args, flag)
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
            launcher[key] = _parse_value(value)
        cfg = LauncherConfig.from_dict(launcher)
    except (ValueError, KeyError) as e:
        _say(f"bad settings: {e}")
        return 2
    if args.dry_run:
        print(json.dumps({"method": args.method, "settings": settings, "launcher": cfg.as_dict()}, indent=2,
                         default=str))
        return 0

    def stop(signum: int, frame: Any) -> None:
        _say(f"launcher got {signal.Signals(signum).name}; the job keeps running: rerun the same command "
             "(Snakemake: --unlock, then rerun) to re-attach")
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        launch(args.output, args.method, settings, cfg, args.run_dir, reattach=not args.no_reattach)
    except LaunchError as e:
        _say(str(e))
        return 1
    except ValueError as e:
        _say(f"bad settings: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
