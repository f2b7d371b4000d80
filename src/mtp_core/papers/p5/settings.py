"""Paper 5's settings, importing no torch: the config section `papers.p5` (`P5Settings`, read by the plan),
`HeadsTrainConfig` and the launcher method's check (`launch_check`, method `p5_heads`); the frontier pipeline's
`FrontierSettings` and the verification rows its prices must reach (`rows_needed`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...config.settings import section_keys
from ...decoding.tree import MEDUSA_TOPK
from ...train.launch.methods import MethodSettings, check_settings
from .frontier import FRONTIER_MODES, search_stop
from .scheduler import feature_depth

ARCHS = ("medusa", "hydra")
LOSSES = ("teacher", "hard")
CANDIDATE_MODES = ("per-depth-frontier", "global-frontier", "all")  # `throughput.candidate_trees`


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


# settings (`P5Plan.run_settings`): `model` (a model spec with `name`), `base_dir` (its prepared checkpoint or None),
# `base_stamp`, `data` (a self-distillation directory), `heads` (`HeadsTrainConfig` keys), `train` (`TrainConfig` keys)
SETTINGS = MethodSettings(
    "p5_heads",
    "heads",
    HeadsTrainConfig.from_dict,
    keys=("model", "base_dir", "base_stamp", "data", "train"),
    settings_check=partial(check_settings, required=("model", "data", "heads", "train"), paths=("data", "base_dir")),
)
launch_check = SETTINGS.check


DEFAULT_TAUS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class FrontierSettings:
    """The pipeline's settings (config `papers.p5.search`, `.debias`, `.throughput`, `.scheduler`, `.regimes`; the
    config's defaults are the schema's, these the same for direct calls; budgets in drafted nodes)."""

    depths: tuple[int, ...] = (1, 2, 3, 4)
    budgets: tuple[int, ...] = (16, 32, 64)
    tolerance: float = 0.4
    max_children_per_parent: int = 10
    default_tree: str = "mc_sim_7b_63"
    frontier_mode: str = "per-depth"
    candidate_mode: str = "per-depth-frontier"
    score_feature: str = "path_value_greedy_depth4"
    taus: tuple[float, ...] = DEFAULT_TAUS
    hysteresis: tuple[float, ...] = (1.0, 0.5)
    policy_period: int = 1
    regimes_tree: str = "mc_sim_7b_63"
    target_accept: int = 1
    price_reps: int = 5
    include_greedy: bool = False

    def __post_init__(self) -> None:
        if self.frontier_mode not in FRONTIER_MODES:
            raise ValueError(f"debias.frontier_mode {self.frontier_mode!r} is not one of {FRONTIER_MODES}")
        if self.candidate_mode not in CANDIDATE_MODES:
            raise ValueError(f"throughput.candidate_mode {self.candidate_mode!r} is not one of {CANDIDATE_MODES}")
        if not 1 <= self.max_children_per_parent <= MEDUSA_TOPK:  # ranks >= 10: no tree index, no rank-table entry
            raise ValueError(f"search.max_children_per_parent {self.max_children_per_parent}: 1 .. {MEDUSA_TOPK}")
        feature_depth(self.score_feature)


def rows_needed(budgets: Sequence[int], tolerance: float, extra_nodes: Sequence[int] = ()) -> int:
    """Verification rows the prices must reach: the largest searched tree (`frontier.search_stop` nodes) or
    priced extra tree (the published default), plus its root row."""
    return max([search_stop(budgets, tolerance), *extra_nodes]) + 1


# ------------------------------------------------------------------- the config section `papers.p5`


@dataclass(frozen=True)
class Task:
    source: str
    dataset: str | None
    title: str | None
    test: int
    calib: int
    train: int


@dataclass(frozen=True)
class Generation:
    """`selfdistill` and `calibration`: greedy continuations."""

    max_new_tokens: int
    batch_size: int


@dataclass(frozen=True)
class Heads:
    source: str
    id: str | None
    path: str | None
    arch: str | None
    num_heads: int
    num_layers: int | None
    lm_head: str | None
    draft_vocab: int | None
    init: str | None
    prefix: bool | None
    dropout: float | None
    loss: str | None
    head_weights: list[float] | None
    holdout: float | None
    seed: int | None
    train: dict[str, Any] | None
    launcher: dict[str, Any] | None


@dataclass(frozen=True)
class Decoding:
    max_new_tokens: int
    batch_size: int
    acceptance: str
    temperature: float
    posterior_threshold: float
    posterior_alpha: float


@dataclass(frozen=True)
class Search:
    heads: list[str] | None
    depths: list[int]
    budgets: list[int]
    tolerance: float
    max_children_per_parent: int
    default_tree: str


@dataclass(frozen=True)
class Debias:
    frontier_mode: str


@dataclass(frozen=True)
class Throughput:
    candidate_mode: str
    max_rows: int
    reps: int
    include_greedy: bool


@dataclass(frozen=True)
class Scheduler:
    score_feature: str
    taus: list[float]
    hysteresis: list[float]
    policy_period: int


@dataclass(frozen=True)
class Regimes:
    tree: str
    target_accept: int


@dataclass(frozen=True)
class Table1:
    tasks: list[str]
    methods: list[str]


@dataclass(frozen=True)
class Table2:
    tasks: list[str]
    heads: str | None  # None: the first searched heads
    nodes: list[int]


@dataclass(frozen=True)
class Tables:
    table1: Table1
    table2: Table2


@dataclass(frozen=True)
class TaskFigure:
    task: str


@dataclass(frozen=True)
class TasksFigure:
    tasks: list[str]


@dataclass(frozen=True)
class Figures:
    heads: str | None  # None: the first searched heads
    fig1: TaskFigure
    fig2: TaskFigure
    fig3: TasksFigure
    fig4: TaskFigure
    fig5: TaskFigure


@dataclass(frozen=True)
class Leaderboard:
    task: str | None
    methods: list[str]


@dataclass(frozen=True)
class P5Settings:
    """`papers.p5` (workflow/schemas/p5.schema.yaml, which holds every default)."""

    enabled: bool
    model: str
    prompt_format: str
    split_seed: int
    max_prompt_tokens: int | None
    tasks: dict[str, Task]
    selfdistill: Generation
    heads: dict[str, Heads]
    calibration: Generation
    decoding: Decoding
    search: Search
    debias: Debias
    throughput: Throughput
    scheduler: Scheduler
    regimes: Regimes
    methods: dict[str, dict[str, Any]]  # a registered decoder and its parameters
    bench: dict[str, int]
    tables: Tables
    figures: Figures
    leaderboard: Leaderboard
    in_all: list[str] | None
    launcher: dict[str, Any]
