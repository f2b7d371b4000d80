"""Paper 5's heads-training settings, importing no torch: `HeadsTrainConfig` and the launcher method's check
(`launch_check`, method `p5_heads`), which the workflow's plan checks run."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from ...config import section_keys
from ...train.launch.methods import MethodSettings, check_settings

ARCHS = ("medusa", "hydra")
LOSSES = ("teacher", "hard")


@dataclass(frozen=True)
class HeadsTrainConfig:
    """The heads (`arch` and its `heads` keys: `medusa.MedusaHeads` / `hydra.HydraHeads`) and how they train."""

    arch: str = "hydra"
    num_heads: int = 4
    num_layers: int = 2
    lm_head: str = "shared"
    draft_vocab: int | None = None
    init: str = "identity"  # hydra only
    prefix: bool = True  # hydra only
    dropout: float = 0.0  # hydra only
    loss: str = "teacher"
    head_weights: tuple[float, ...] | None = None
    holdout: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"heads.arch: {self.arch!r} is not one of {', '.join(ARCHS)}")
        if self.loss not in LOSSES:
            raise ValueError(f"heads.loss: {self.loss!r} is not one of {', '.join(LOSSES)}")
        if self.head_weights is not None and len(self.head_weights) != self.num_heads:
            raise ValueError(f"heads.head_weights: {len(self.head_weights)} weights for {self.num_heads} heads")
        if not 0.0 <= self.holdout < 1.0:
            raise ValueError(f"heads.holdout: a fraction in [0, 1), got {self.holdout}")
        if self.head_weights is not None:
            object.__setattr__(self, "head_weights", tuple(float(w) for w in self.head_weights))

    @classmethod
    def from_dict(cls, d: dict | None) -> HeadsTrainConfig:
        return cls(**section_keys(cls, d, "heads"))

    def module_config(self) -> dict[str, Any]:
        """The keys the heads module takes."""
        keys = ["num_heads", "num_layers", "lm_head", "draft_vocab"]
        if self.arch == "hydra":
            keys += ["init", "prefix", "dropout"]
        return {k: getattr(self, k) for k in keys}

    def weights(self) -> list[float]:
        return list(self.head_weights or [1.0] * self.num_heads)


# settings (`plan.heads_settings`): `model` (a model spec with `name`), `base_dir` (its prepared checkpoint or None),
# `base_stamp`, `data` (a self-distillation directory), `heads` (`HeadsTrainConfig` keys), `train` (`TrainConfig` keys)
SETTINGS = MethodSettings(
    "p5_heads",
    "heads",
    HeadsTrainConfig.from_dict,
    keys=("model", "base_dir", "base_stamp", "data", "train"),
    settings_check=partial(check_settings, required=("model", "data", "heads", "train"), paths=("data", "base_dir")),
)
launch_check = SETTINGS.check
