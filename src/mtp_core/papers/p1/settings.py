"""Paper 1's training settings, importing no torch: the loss's (`P1LossConfig`), the blocked layout's geometry
check (`check_geometry`), the method's (`P1Config`) and the launcher method's check (`launch_check`), which the
workflow's plan checks run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...config.settings import section_keys
from ...data.rows import TEMPLATES
from ...train.launch.methods import MethodSettings

OBJECTIVES = ("hard_teacher", "soft_teacher", "gt", "eq3")
READOUTS = ("argmax", "sample")
ATTENTION = ("auto", "dense", "flex")


def check_geometry(seq_len: int, num_regions: int, k: int, offset: int) -> tuple[int, int]:
    """Validate (S, M, k, offset); return (W, P)."""
    if num_regions < 1 or seq_len < 1:
        raise ValueError(f"seq_len ({seq_len}) and num_regions ({num_regions}) must be positive")
    if seq_len % num_regions:
        raise ValueError(f"seq_len ({seq_len}) must be a multiple of num_regions ({num_regions})")
    width = seq_len // num_regions
    if not 1 <= k <= width:
        raise ValueError(f"k ({k}) must be in [1, region width {width}] (seq_len={seq_len}, num_regions={num_regions})")
    prefix = width - (k - 1)
    if not -(prefix - 1) <= offset <= 0:
        raise ValueError(f"offset ({offset}) must be in [-{prefix - 1}, 0] for k={k}, region width {width}")
    return width, prefix


@dataclass(frozen=True)
class P1LossConfig:
    """What the P1 loss computes (config section `p1.loss` keys, same names).

    objective: hard_teacher | soft_teacher | gt | eq3 (module docstring); prefix_weight: weight of the prefix
    NTP loss (0 = off, the main runs; 1 = Table 5 "Prefix Loss"); entropy_weight: beta of the student entropy
    term (0 = off); student_readout: argmax (paper) | sample; attention: auto (flex BlockMask when the model
    runs flex_attention, else a dense mask) | dense | flex; per_position_metrics: log accuracy/confidence per
    prediction position j < metrics_k_max.
    """

    objective: str = "hard_teacher"
    prefix_weight: float = 0.0
    entropy_weight: float = 0.0
    student_readout: str = "argmax"
    attention: str = "auto"
    per_position_metrics: bool = True
    metrics_k_max: int = 16

    def __post_init__(self) -> None:
        for name, allowed in (("objective", OBJECTIVES), ("student_readout", READOUTS), ("attention", ATTENTION)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"p1.loss.{name}: {getattr(self, name)!r} is not one of {', '.join(allowed)}")
        if self.prefix_weight < 0:
            raise ValueError(f"p1.loss.prefix_weight must be >= 0, got {self.prefix_weight}")

    @classmethod
    def from_dict(cls, d: dict | None) -> P1LossConfig:
        return cls(**section_keys(cls, d, "p1.loss"))

    @property
    def needs_teacher(self) -> bool:
        return self.objective != "gt"


@dataclass(frozen=True)
class P1Config:
    """Paper 1 training settings (config section `p1.train`, keys = field names; `loss` = `P1LossConfig`).

    seq_len N=160 and num_regions M = N / (2 k_max) = 5 (App. A.1; None computes it); k uniform in
    [k_min, k_max] = [2, 16] per (step, micro-batch) unless `random_k=False` (Static-k ablation: k = k_max);
    random offsets unless `random_offset=False`; `coupled_draw` (the official draw); `bda` (Table 4 BDA ablation,
    student only); `template` auto (the model's `chat_template` flag) | chat | plain; `append_eos`;
    `shuffle` and `seed` of the row order; `teacher_dtype` (e.g. "bfloat16" to halve the teacher's memory;
    None = the student's dtype); `mask_cov_scale`: the `<MTP>` row is a draw from N(mu, scale * Sigma) of the
    real-token embeddings (§4.1; 1 = the paper's).
    """

    seq_len: int = 160
    num_regions: int | None = None
    k_min: int = 2
    k_max: int = 16
    random_k: bool = True
    random_offset: bool = True
    coupled_draw: bool = False
    bda: bool = False
    template: str = "auto"
    append_eos: bool = False
    shuffle: bool = True
    seed: int = 0
    teacher_dtype: str | None = None
    mask_cov_scale: float = 1.0
    loss: P1LossConfig = field(default_factory=P1LossConfig)

    def __post_init__(self) -> None:
        if self.num_regions is None:
            object.__setattr__(self, "num_regions", max(1, self.seq_len // (2 * self.k_max)))
        if self.template not in TEMPLATES:
            raise ValueError(f"p1.template: {self.template!r} is not one of {', '.join(TEMPLATES)}")
        if isinstance(self.loss, dict):
            object.__setattr__(self, "loss", P1LossConfig.from_dict(self.loss))
        if not 1 <= self.k_min <= self.k_max:
            raise ValueError(f"p1: need 1 <= k_min ({self.k_min}) <= k_max ({self.k_max})")
        check_geometry(self.seq_len, self.num_regions, self.k_max, 0)  # raises with the geometry at fault
        if self.loss.metrics_k_max != self.k_max:
            object.__setattr__(self, "loss", P1LossConfig(**{**asdict(self.loss), "metrics_k_max": self.k_max}))

    @classmethod
    def from_dict(cls, d: dict | None) -> P1Config:
        d = section_keys(cls, d, "p1")
        if "loss" in d:
            d["loss"] = P1LossConfig.from_dict(d["loss"])
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# settings (`plan.run_settings`): those of `check_model_data_train`, `p1` (P1Config keys) and `mask_seed`
SETTINGS = MethodSettings("p1", "p1", P1Config.from_dict, keys=("mask_seed",))
launch_check = SETTINGS.check
