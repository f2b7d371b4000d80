"""Training: one loop for every paper (`loop.train`) with a step function per method.

`config.TrainConfig` (the `train:` keys), `optim` (AdamW groups, warm-up schedule), `checkpoint` (resumable
states, HF exports), `curves` (the per-step CSV), `dist` (one process, DDP, FSDP2), `launch` (the submitit
launcher, `python -m mtp_core.cli train`), and the step functions: `p1` (paper 1, student-forced
self-distillation).

The names below load their module on first use (PEP 562): the Snakefile reads `launch.settings` without torch.
"""

from ..io import lazy_exports

_WHERE = {
    "BatchSource": "loop",
    "CurveWriter": "curves",
    "DDPDist": "dist",
    "FSDPDist": "dist",
    "LocalDist": "dist",
    "MicroBatchSpec": "loop",
    "SAVE": "loop",
    "ShuffledOrder": "loop",
    "StepContext": "loop",
    "StepFn": "loop",
    "StepOutput": "loop",
    "StopTraining": "loop",
    "TrainConfig": "config",
    "TrainResult": "loop",
    "WarmupSchedule": "optim",
    "build_optimizer": "optim",
    "build_scheduler": "optim",
    "export_hf": "checkpoint",
    "latest_checkpoint": "checkpoint",
    "load_checkpoint": "checkpoint",
    "make_dist": "dist",
    "param_groups": "optim",
    "read_curves": "curves",
    "save_checkpoint": "checkpoint",
    "train": "loop",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
