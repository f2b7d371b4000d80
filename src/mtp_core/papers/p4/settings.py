"""Paper 4's settings, importing no torch: the config section `papers.p4` (`P4Settings`, read by the plan), the
split (`DMTDSpec`, recorded as `model.config.dmtd`), the method's (`DMTDConfig`) and the launcher method's check
(`launch_check`), which the workflow's plan checks run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ...config.settings import section_keys
from ...train.launch.methods import MethodSettings
from ...train.sft_settings import SFTConfig
from .epochs import resolve_train

COMBINES = ("add", "select")
CONFIG_KEY = "dmtd"  # model.config.dmtd: the split and training τ a checkpoint was trained with
CONFIG_VERSION = 1


@dataclass(frozen=True)
class DMTDSpec:
    """A split ExDy with its combine rule (`encoding_layers` E, `decoding_layers` D, `combine` add | select)."""

    encoding_layers: int
    decoding_layers: int
    combine: str = "add"

    def __post_init__(self) -> None:
        if self.combine not in COMBINES:
            raise ValueError(f"combine: {self.combine!r} is not one of {', '.join(COMBINES)}")
        if self.encoding_layers < 0 or self.decoding_layers < 0:
            raise ValueError(
                f"encoding_layers ({self.encoding_layers}) and decoding_layers ({self.decoding_layers}) must be >= 0"
            )

    def check(self, num_layers: int) -> None:
        """T = L - E - D >= 1: at least one thinking layer."""
        if self.encoding_layers + self.decoding_layers >= num_layers:
            raise ValueError(
                f"encoding_layers + decoding_layers = {self.encoding_layers} + {self.decoding_layers} must be below "
                f"the model's {num_layers} layers (at least one thinking layer)"
            )

    def thinking(self, num_layers: int) -> tuple[int, int]:
        """[first, stop) of the thinking layers."""
        self.check(num_layers)
        return self.encoding_layers, num_layers - self.decoding_layers

    @property
    def name(self) -> str:
        return f"E{self.encoding_layers}D{self.decoding_layers}"

    def as_config(self, cycle: int) -> dict[str, Any]:
        """`model.config.dmtd` of a checkpoint trained with this split at training τ `cycle`."""
        return {**asdict(self), "cycle": int(cycle), "version": CONFIG_VERSION}

    @classmethod
    def from_model(cls, model: Any, **overrides: Any) -> DMTDSpec:
        """The split recorded in `model.config.dmtd`, with `overrides` (None values ignored); a model without it
        needs both layer counts given (an untrained baseline)."""
        from ...decoding import layers as L

        saved = dmtd_config(model)
        given = {k: v for k, v in overrides.items() if v is not None}
        keys = ("encoding_layers", "decoding_layers", "combine")
        merged = {k: given.get(k, saved.get(k)) for k in keys}
        missing = [k for k in keys[:2] if merged[k] is None]
        if missing:
            raise ValueError(
                f"the model has no `config.{CONFIG_KEY}` (not trained with DMTD): give {' and '.join(missing)}"
            )
        spec = cls(int(merged["encoding_layers"]), int(merged["decoding_layers"]), merged["combine"] or "add")
        spec.check(L.num_layers(model))
        return spec


def dmtd_config(model: Any) -> Mapping[str, Any]:
    """`model.config.dmtd` as a mapping ({} when the model was not trained with DMTD)."""
    return dict(getattr(model.config, CONFIG_KEY, None) or {})


PHASES = ("row", "random")
OVERLONG = ("truncate", "drop")


@dataclass(frozen=True)
class DMTDConfig(SFTConfig):
    """Paper 4's method settings (config `papers.p4.method`): the SFT data settings (`max_tokens`, `template`,
    `loss_on`, `shuffle`, `seed`) plus the split (`encoding_layers`, `decoding_layers`, `combine`), the training
    τ `cycle`, `phase` (row | random), `overlong` (truncate | drop), `train_embeddings`,
    `gradient_checkpointing` (module docstring), and the run length in `epochs` with its `warmup_ratio`
    (`epochs` module; None: `train.max_steps`, `train.warmup_steps`)."""

    max_tokens: int = 4096  # the paper's rows, not the SFT default
    encoding_layers: int = 0
    decoding_layers: int = 8
    cycle: int = 3
    combine: str = "add"
    phase: str = "row"
    overlong: str = "drop"
    train_embeddings: bool = True
    gradient_checkpointing: bool = False
    epochs: float | None = None
    warmup_ratio: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cycle < 1:
            raise ValueError(f"cycle (τ) must be >= 1, got {self.cycle}")
        if self.phase not in PHASES:
            raise ValueError(f"phase: {self.phase!r} is not one of {', '.join(PHASES)}")
        if self.overlong not in OVERLONG:
            raise ValueError(f"overlong: {self.overlong!r} is not one of {', '.join(OVERLONG)}")
        if self.epochs is not None and not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs}")
        if self.warmup_ratio is not None and not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        self.spec  # noqa: B018  (the split's own checks)

    @property
    def spec(self) -> DMTDSpec:
        return DMTDSpec(self.encoding_layers, self.decoding_layers, self.combine)

    @classmethod
    def from_dict(cls, d: dict | None) -> DMTDConfig:
        return cls(**section_keys(cls, d, "p4.method"))


def _resolve_train(settings: dict) -> dict:
    """Settings whose `train` is resolved for the check: an epoch-based run's `train.max_steps` is
    `epochs.LAUNCHER_STEPS` until its job counts rows."""
    cfg = DMTDConfig.from_dict(settings.get("p4"))
    try:
        train = resolve_train(settings.get("train") or {}, cfg.epochs, cfg.warmup_ratio, rows=None)
    except ValueError as e:
        raise ValueError(f"p4 settings: {e}") from None
    return {**settings, "train": train}


# settings (`plan.run_settings`): those of `check_model_data_train` and `p4` (DMTDConfig keys)
SETTINGS = MethodSettings("p4", "p4", DMTDConfig.from_dict, prepare=_resolve_train)
launch_check = SETTINGS.check


# ------------------------------------------------------------------- the config section `papers.p4`

STEP_SEP = "@step"  # `<run>@step0`: a run's split on its start weights; `<model>@step0`: the start model
QUALITY_TABLES = ("table1", "table2", "table4", "table5")
RESERVED = ("train", "evaluate", "vanilla", "speed", "table", "figure4", "figure5", "select_tau")  # rules `p4_<x>`


@dataclass(frozen=True)
class TeacherForced:
    dataset: str | None
    rows: int
    batch_size: int
    max_tokens: int


@dataclass(frozen=True)
class Speed:
    run: str | None
    prompt_tokens: int
    new_tokens: int
    prompts: int
    batch_sizes: list[int]
    taus: list[int]
    seed: int


@dataclass(frozen=True)
class RunsTable:
    runs: list[str]


@dataclass(frozen=True)
class GroupsTable:
    groups: dict[str, list[str]]


@dataclass(frozen=True)
class OffsetsTable:
    run: str
    taus: list[int]
    untrained: bool


@dataclass(frozen=True)
class Tables:
    table1: RunsTable
    table2: GroupsTable
    table3: dict[str, Any]
    table4: RunsTable
    table5: OffsetsTable


@dataclass(frozen=True)
class CurvesFigure:
    runs: list[str]
    bins: int


@dataclass(frozen=True)
class Figures:
    fig4: dict[str, Any]
    fig5: CurvesFigure


@dataclass(frozen=True)
class Leaderboard:
    run: str | None
    selected: bool
    retention: float


@dataclass(frozen=True)
class P4Settings:
    """`papers.p4` (workflow/schemas/p4.schema.yaml, which holds every default; `method`, `train`, `launcher`,
    `runs`, `evaluation` and `tasks` stay maps: runs merge into them key by key, and an absent key inherits)."""

    enabled: bool
    model: str
    dataset: str
    method: dict[str, Any]
    train: dict[str, Any]
    launcher: dict[str, Any]
    runs: dict[str, dict[str, Any]]
    teacher_forced: TeacherForced
    evaluation: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    overall: list[str] | None
    speed: Speed
    bench: dict[str, int]
    tables: Tables
    figures: Figures
    leaderboard: Leaderboard
    in_all: list[str] | None
