"""Training: one loop for every paper (`loop.train`) with a step function per method.

`config.TrainConfig` (the `train:` keys), `optim` (AdamW groups, warm-up schedule), `checkpoint` (resumable
states, HF exports), `curves` (the per-step CSV), `dist` (single process today; the DDP/FSDP2 hook), and the
step functions: `p1` (paper 1, student-forced self-distillation).
"""

from .checkpoint import export_hf, latest_checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .curves import CurveWriter, read_curves
from .dist import DDPDist, LocalDist
from .loop import (
    BatchSource,
    MicroBatchSpec,
    ShuffledOrder,
    StepContext,
    StepFn,
    StepOutput,
    TrainResult,
    train,
)
from .optim import WarmupSchedule, build_optimizer, build_scheduler, param_groups

__all__ = [
    "BatchSource",
    "CurveWriter",
    "DDPDist",
    "LocalDist",
    "MicroBatchSpec",
    "ShuffledOrder",
    "StepContext",
    "StepFn",
    "StepOutput",
    "TrainConfig",
    "TrainResult",
    "WarmupSchedule",
    "build_optimizer",
    "build_scheduler",
    "export_hf",
    "latest_checkpoint",
    "load_checkpoint",
    "param_groups",
    "read_curves",
    "save_checkpoint",
    "train",
]
