"""Training: one loop for every paper (`loop.train`) with a step function per method.

`config.TrainConfig` (the `train:` keys), `optim` (AdamW groups, warm-up schedule), `checkpoint` (resumable
states, HF exports), `curves` (the per-step CSV), `dist` (one process, DDP, FSDP2), `launch` (the submitit
launcher, `python -m mtp_core.cli train`), and the step functions: `p1` (paper 1, student-forced
self-distillation).
"""

from .checkpoint import export_hf, latest_checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .curves import CurveWriter, read_curves
from .dist import DDPDist, FSDPDist, LocalDist, make_dist
from .loop import (
    SAVE,
    BatchSource,
    MicroBatchSpec,
    ShuffledOrder,
    StepContext,
    StepFn,
    StepOutput,
    StopTraining,
    TrainResult,
    train,
)
from .optim import WarmupSchedule, build_optimizer, build_scheduler, param_groups

__all__ = [
    "BatchSource",
    "CurveWriter",
    "DDPDist",
    "FSDPDist",
    "LocalDist",
    "MicroBatchSpec",
    "SAVE",
    "ShuffledOrder",
    "StepContext",
    "StepFn",
    "StepOutput",
    "StopTraining",
    "TrainConfig",
    "TrainResult",
    "WarmupSchedule",
    "build_optimizer",
    "build_scheduler",
    "export_hf",
    "latest_checkpoint",
    "load_checkpoint",
    "make_dist",
    "param_groups",
    "read_curves",
    "save_checkpoint",
    "train",
]
