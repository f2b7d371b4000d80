"""`TrainConfig`: the keys of a `train:` config section, shared by every paper's training job.

Defaults are paper 1's recipe (App. A.1 "Hyperparameters" + the official `ss.yaml`): AdamW with
betas (0.9, 0.95) and weight decay 0.1 (the paper says "PyTorch defaults"; the official config is what ran),
2000 warm-up steps to a constant 1e-5, clipping at 1.0, global batch 128.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..config.settings import section_keys

SCHEDULES = ("constant", "cosine", "linear", "wsd")
PRECISIONS = ("auto", "fp32", "bf16")
PARAM_DTYPES = ("float32", "bfloat16", "float16")
WEIGHTINGS = ("tokens", "micro_batch")


@dataclass(frozen=True)
class TrainConfig:
    """One training run's loop settings (config keys = field names).

    Batch: `global_batch_size` rows per optimiser step, in micro-batches of `micro_batch_size` rows; with
    `world_size` processes each runs `global / (micro * world)` accumulation micro-batches, so the global batch
    (and the data each step sees) is the same for any process count.
    Optimiser: `lr`, `betas`, `eps`, `weight_decay`, `decay_norms_and_biases` (False: 1-D parameters, i.e.
    norms and biases, get no weight decay), `fused` (default; fused AdamW where the device supports it, as the
    official recipe; `optim.build_optimizer`).
    Schedule: `warmup_steps` of linear warm-up, then `schedule` = constant | cosine | linear decay to
    `min_lr_ratio * lr` at `max_steps` | wsd (constant, then a cosine decay to `min_lr_ratio * lr` over the last
    `decay_fraction` of `max_steps`); `warmup_from_zero=True` reproduces the official first LR of 0.
    `grad_clip` (<= 0 disables); `precision` = auto (bf16 autocast where the device computes bf16
    natively: CUDA, a CPU with AVX512-BF16 or AMX; fp32 elsewhere: `loop.autocast_dtype`) | fp32 | bf16.
    `param_dtype`: the dtype of the trained parameters, their gradients and AdamW's states, whatever dtype the model
    was loaded in (the paper scale declares its models bf16 for inference): float32 (default) holds master weights
    while the compute runs in `precision` / FSDP2's `fsdp_param_dtype`, as mixed-precision trainings do (AdamW on
    bf16 weights rounds most updates of a 1e-5-1e-4 learning rate away); bfloat16 trains bf16 weights throughout
    (paper 1's official `bf16-true`).
    `loss_weighting`: micro_batch (default; the official `loss / grad_accum`, averaged over ranks: the step
    minimises the mean of the micro-batches' mean losses, every micro-batch counting equally) | tokens (each
    micro-batch's mean weighted by its supervised tokens: the step minimises the token mean over the global
    batch). They differ when micro-batches carry different numbers of supervised tokens: paper 1 draws k per
    micro-batch, so under `tokens` a micro-batch weighs R k and the training mix leans to large k.
    Checkpoints: a resumable state every `checkpoint_every` steps (0: only at the end), the `keep_last`
    newest kept; an HF export of the model at each of `save_steps` (kept, training-dynamics figures) and at
    the end (`final_dir`). `resume`: continue from the newest state in `out_dir/checkpoints`.
    """

    max_steps: int
    global_batch_size: int = 128
    micro_batch_size: int = 32
    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    decay_norms_and_biases: bool = False
    fused: bool = True
    warmup_steps: int = 2000
    warmup_from_zero: bool = False
    schedule: str = "constant"
    min_lr_ratio: float = 0.0
    decay_fraction: float = 0.1
    grad_clip: float = 1.0
    precision: str = "auto"
    param_dtype: str = "float32"
    loss_weighting: str = "micro_batch"
    checkpoint_every: int = 1000
    keep_last: int = 1
    save_steps: tuple[int, ...] = ()
    final_dir: str = "model"
    resume: bool = True
    seed: int = 0
    log_every: int = 10
    progress: bool = True
    threads: int | None = None

    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> None:
            raise ValueError(f"train.{key}: {why}")

        if self.max_steps < 0:
            bad("max_steps", f"must be >= 0, got {self.max_steps}")
        if self.micro_batch_size < 1 or self.global_batch_size < 1:
            bad("micro_batch_size", "batch sizes must be positive")
        if self.global_batch_size % self.micro_batch_size:
            bad(
                "global_batch_size",
                f"{self.global_batch_size} is not a multiple of micro_batch_size {self.micro_batch_size}",
            )
        if self.schedule not in SCHEDULES:
            bad("schedule", f"{self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if self.precision not in PRECISIONS:
            bad("precision", f"{self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.param_dtype not in PARAM_DTYPES:
            bad("param_dtype", f"{self.param_dtype!r} is not one of {', '.join(PARAM_DTYPES)}")
        if self.loss_weighting not in WEIGHTINGS:
            bad("loss_weighting", f"{self.loss_weighting!r} is not one of {', '.join(WEIGHTINGS)}")
        if self.warmup_steps < 0 or self.checkpoint_every < 0 or self.keep_last < 1:
            bad("warmup_steps", "warmup_steps and checkpoint_every must be >= 0, keep_last >= 1")
        if not 0.0 < self.decay_fraction <= 1.0:
            bad("decay_fraction", f"must be in (0, 1], got {self.decay_fraction}")
        if len(self.betas) != 2:
            bad("betas", f"needs two values, got {self.betas}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        object.__setattr__(self, "save_steps", tuple(sorted({int(s) for s in self.save_steps})))

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Build from a config section; unknown keys are an error naming them."""
        d = section_keys(cls, d, "train")
        if "max_steps" not in d:
            raise ValueError("train.max_steps is required")
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["betas"] = list(self.betas)
        d["save_steps"] = list(self.save_steps)
        return d

    def accumulation(self, world_size: int = 1) -> int:
        """Micro-batches per process per step."""
        chunks = self.global_batch_size // self.micro_batch_size
        if chunks % world_size:
            raise ValueError(
                f"train.global_batch_size: {self.global_batch_size} rows in micro-batches of {self.micro_batch_size} "
                f"give {chunks} micro-batches, not divisible by world_size {world_size}"
            )
        return chunks // world_size


def step_dir_name(step: int) -> str:
    """The directory of step `step`'s checkpoint or export (`checkpoint.save_checkpoint`, `exports/` of a run)."""
    return f"step-{step:08d}"
