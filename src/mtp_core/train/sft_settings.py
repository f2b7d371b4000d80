"""The settings of the fine-tune (`sft`, a `finetuned` model source; `train.sft`), importing no torch: `SFTConfig`
and the launcher method's check (`launch_check`), which the workflow's plan checks run."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.settings import section_keys
from ..data.rows import TEMPLATES
from .launch.methods import MethodSettings

LOSS_ON = ("response", "all")


@dataclass(frozen=True)
class SFTConfig:
    """`max_tokens` per row (longer rows are truncated, and counted in the log) and per packed sequence;
    `template` auto | chat | plain (auto: the model's `chat_template` flag); `loss_on` response | all;
    `shuffle`, `seed` of the row order."""

    max_tokens: int = 512
    template: str = "auto"
    loss_on: str = "response"
    shuffle: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ValueError(f"sft.template: {self.template!r} is not one of {', '.join(TEMPLATES)}")
        if self.loss_on not in LOSS_ON:
            raise ValueError(f"sft.loss_on: {self.loss_on!r} is not one of {', '.join(LOSS_ON)}")
        if self.max_tokens < 2:
            raise ValueError(f"sft.max_tokens must be >= 2, got {self.max_tokens}")

    @classmethod
    def from_dict(cls, d: dict | None) -> SFTConfig:
        return cls(**section_keys(cls, d, "sft"))


# settings (`source: finetuned` models; `train.finetune.finetune_settings`): those of `check_model_data_train` and `sft`
SETTINGS = MethodSettings("sft", "sft", SFTConfig.from_dict)
launch_check = SETTINGS.check
