"""Launcher settings: where and how a training runs (config section `launcher`, overridden per paper and run)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ...config.settings import ConfigError, section_keys
from ..config import TrainConfig

CLUSTERS = ("slurm", "local", "debug")


class LaunchError(RuntimeError):
    """A training job failed or cannot be launched; the message is what the rule's log shows."""


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
            if getattr(self, key) is not None and self.strategy != "fsdp":
                bad(key, f"set, but the strategy is {self.strategy!r}: FSDP2's mixed precision would be ignored")
        if self.fsdp_replicate > 1 and (self.strategy != "fsdp" or self.num_tasks % self.fsdp_replicate):
            bad(
                "fsdp_replicate",
                f"{self.fsdp_replicate} replica groups need strategy fsdp and a divisor of nodes x tasks_per_node "
                f"= {self.num_tasks} (strategy {self.strategy!r})",
            )
        if self.gpus_per_node and self.gpus_per_node != self.tasks_per_node:
            bad(
                "gpus_per_node",
                f"{self.gpus_per_node} GPUs per node for {self.tasks_per_node} processes per node: a training "
                "runs one process per GPU (tasks_per_node = gpus_per_node)",
            )
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


def check_training(where: str, train: dict | None, launcher: dict | None) -> tuple[TrainConfig, LauncherConfig]:
    """A training's merged `train` and `launcher` settings, checked together before any job (every training
    method's plan check calls this): each builds, and the global batch splits into whole micro-batches over the
    launcher's processes, as `launch` will require. Raises ConfigError naming `where`."""
    try:
        tc = TrainConfig.from_dict(train)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}.train: {e}") from None
    try:
        lc = LauncherConfig.from_dict(launcher)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}.launcher: {e}") from None
    try:
        tc.accumulation(lc.num_tasks)
    except ValueError as e:
        raise ConfigError(
            f"{where}: {e} (the launcher starts nodes {lc.nodes} x tasks_per_node {lc.tasks_per_node} = "
            f"{lc.num_tasks} processes)"
        ) from None
    return tc, lc
