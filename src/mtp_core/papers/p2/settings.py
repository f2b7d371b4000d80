"""Paper 2's settings, importing no torch: the config section `papers.p2` (`P2Settings`, read by the plan), the
loss's (`P2LossConfig`), the method's (`P2Config`) and the launcher method's check (`launch_check`), which the
workflow's plan checks run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ...config.settings import HEAD_CONCAT, HEAD_INITS, section_keys
from ...train.launch.methods import MethodSettings, check_settings

TRUNK = ("frozen", "last_layers", "all")
DIRECTIONS = ("forward", "reverse", "hybrid")
INDEX = ("main", "union")
NORMS = ("renormalize", "full")
TEACHERS = ("main", "ensemble_mean", "ensemble_split")


@dataclass(frozen=True)
class P2LossConfig:
    """The loss settings of one run (config `papers.p2.method`'s loss keys; module docstring). `chunk_rows`: how
    training computes it, not what (`chunked.p2_loss_hidden`: the logit rows of one depth per chunk)."""

    alpha: float = 0.3
    beta: float = 1.0
    main_weight: float = 1.0
    topn: int = 10000
    direction: str = "forward"
    index: str = "main"
    norm: str = "renormalize"
    detach: bool = True
    hybrid_weight: float = 0.5
    teacher: str = "main"
    weight_schedule: dict | None = None
    normalize_by_heads: bool = False
    chunk_rows: int | None = 1024

    def __post_init__(self) -> None:
        for key, allowed in (("direction", DIRECTIONS), ("index", INDEX), ("norm", NORMS), ("teacher", TEACHERS)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key}: {getattr(self, key)!r} is not one of {', '.join(allowed)}")
        if self.topn < 1:
            raise ValueError(f"topn (N) must be >= 1, got {self.topn}")
        if self.alpha < 0 or self.beta < 0 or self.main_weight < 0:
            raise ValueError(f"alpha, beta and main_weight must be >= 0 (beta {self.beta}, alpha {self.alpha})")
        if self.chunk_rows is not None and self.chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1 or null (no chunking), got {self.chunk_rows}")
        if not 0.0 <= self.hybrid_weight <= 1.0:
            raise ValueError(f"hybrid_weight must be in [0, 1], got {self.hybrid_weight}")
        ws = self.weight_schedule
        if ws is not None:
            if set(ws) != {"until_step", "alpha", "beta"} or len(ws["alpha"]) != 2 or len(ws["beta"]) != 2:
                raise ValueError("weight_schedule: {until_step: N, alpha: [from, to], beta: [from, to]}")
            if int(ws["until_step"]) < 1 or min(*ws["alpha"], *ws["beta"]) < 0:
                raise ValueError("weight_schedule: until_step >= 1 and weights >= 0")

    @classmethod
    def from_dict(cls, d: dict | None) -> P2LossConfig:
        return cls(**section_keys(cls, d, "p2 loss"))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def weights(self, step: int, num_heads: int) -> tuple[float, float]:
        """(α_k, β_k) at optimiser step `step` (0-based), the same for every head."""
        alpha, beta = self.alpha, self.beta
        ws = self.weight_schedule
        if ws is not None:
            t = min(1.0, step / int(ws["until_step"]))
            alpha = ws["alpha"][0] + t * (ws["alpha"][1] - ws["alpha"][0])
            beta = ws["beta"][0] + t * (ws["beta"][1] - ws["beta"][0])
        if self.normalize_by_heads:
            alpha = alpha / num_heads
        return float(alpha), float(beta)


@dataclass(frozen=True)
class P2Config:
    """One run's method settings (config `papers.p2.method`, keys = field names; `loss` = `P2LossConfig`).

    `seq_len` window tokens; `val_tokens` held out at the stream's end; `window_seed` the window order;
    `num_heads` K; `trunk` frozen | last_layers | all with `trunk_layers`; `init` copy_last | normal (the heads'
    initialisation, `DeepSeekMTPHeads.from_trunk`); `concat` (emb_first | hidden_first); `feature_cache` (frozen
    trunks only: read the trunk's features from the cache instead of running it)."""

    seq_len: int = 4096
    val_tokens: int = 100_000
    window_seed: int = 0
    num_heads: int = 1
    trunk: str = "frozen"
    trunk_layers: int = 0
    init: str = "copy_last"
    concat: str = "emb_first"
    feature_cache: bool = True
    loss: P2LossConfig = field(default_factory=P2LossConfig)

    def __post_init__(self) -> None:
        if isinstance(self.loss, dict):
            object.__setattr__(self, "loss", P2LossConfig.from_dict(self.loss))
        if self.num_heads < 1:
            raise ValueError(f"num_heads (K) must be >= 1, got {self.num_heads}")
        if self.seq_len < self.num_heads + 2:
            raise ValueError(f"seq_len {self.seq_len} leaves no scored position for head {self.num_heads}")
        if self.trunk not in TRUNK:
            raise ValueError(f"trunk: {self.trunk!r} is not one of {', '.join(TRUNK)}")
        if (self.trunk == "last_layers") != (self.trunk_layers > 0):
            raise ValueError(f"trunk_layers {self.trunk_layers}: > 0 exactly when trunk is last_layers")
        if self.init not in HEAD_INITS or self.concat not in HEAD_CONCAT:
            raise ValueError(f"init {self.init!r} / concat {self.concat!r}: one of {HEAD_INITS} / {HEAD_CONCAT}")

    @classmethod
    def from_dict(cls, d: dict | None) -> P2Config:
        d = section_keys(cls, d, "p2 method")
        if "loss" in d:
            d["loss"] = P2LossConfig.from_dict(d["loss"])
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def feature_layer(self, num_layers: int) -> int | None:
        """The trunk layer whose input a feature cache holds (L: h^0), or None when nothing is cached."""
        if not self.feature_cache or self.trunk == "all":
            return None
        return num_layers - self.trunk_layers


def _absolute_extend(settings: dict) -> dict:
    """Checked settings with the extended heads' path (`extend.heads`) absolute."""
    if not settings.get("extend"):
        return settings
    return {**settings, "extend": {**settings["extend"], "heads": str(Path(settings["extend"]["heads"]).resolve())}}


# settings (`P2Plan.run_settings`): `model` (spec), `base_dir` (its prepared checkpoint), `base_stamp`, `trunk_dir` (an
# extension of a run that trained its trunk: that run's export, else None), `shards` (index.json), `features` (a
# feature directory or None), `extend` ({heads, new_heads, group, source} or None), `train` (TrainConfig keys), `p2`
# (P2Config keys); paths come back absolute
SETTINGS = MethodSettings(
    "p2",
    "p2",
    P2Config.from_dict,
    keys=("model", "base_dir", "base_stamp", "trunk_dir", "shards", "features", "extend", "train"),
    settings_check=partial(
        check_settings,
        required=("model", "shards", "train", "p2"),
        paths=("shards", "features", "base_dir", "trunk_dir"),
    ),
    finish=_absolute_extend,
)
launch_check = SETTINGS.check


# ----------------------------------------------------- the config section `papers.p2` (workflow/schemas/p2.schema.yaml)


@dataclass(frozen=True)
class Run:
    """`runs.<name>`: what the run overrides (None: the section's)."""

    title: str | None
    model: str | None
    dataset: str | None
    method: dict[str, Any] | None
    train: dict[str, Any] | None
    launcher: dict[str, Any] | None
    seeds: int | None
    extend: dict[str, Any] | None  # {from, new_heads, group, source}


@dataclass(frozen=True)
class Speed:
    per_set: int | None
    max_new_tokens: int
    batch_size: int
    modeled: bool
    bench: dict[str, int]


@dataclass(frozen=True)
class RunsTable:
    runs: list[str]


@dataclass(frozen=True)
class Table1:
    blocks: list[RunsTable]


@dataclass(frozen=True)
class Table3:
    """The configuration as run (no keys)."""


@dataclass(frozen=True)
class SpeedRow:
    run: str
    depth: int | None
    title: str | None


@dataclass(frozen=True)
class SpeedExperiment:
    runs: list[str] | None
    rows: list[SpeedRow] | None
    baseline: str
    kv_cache: list[bool]


@dataclass(frozen=True)
class LoopFigure:
    runs: list[str]
    depth: int | None
    prompt_set: str | None


@dataclass(frozen=True)
class RunFigure:
    run: str


@dataclass(frozen=True)
class TopNFigure:
    run: str | None


@dataclass(frozen=True)
class Tables:  # None: not configured
    table1: Table1 | None
    table2: RunsTable | None
    table3: Table3 | None
    table4: RunsTable | None
    table5: RunsTable | None
    table6: RunsTable | None
    table7: RunsTable | None
    table8: SpeedExperiment | None


@dataclass(frozen=True)
class Figures:  # None: not configured
    fig3: LoopFigure | None
    fig4: SpeedExperiment | None
    fig5: SpeedExperiment | None
    fig6: TopNFigure | None
    fig7: RunFigure | None
    fig8: SpeedExperiment | None
    fig9: RunsTable | None
    fig10: RunFigure | None
    fig11: LoopFigure | None
    fig12: LoopFigure | None
    fig13: LoopFigure | None
    fig14: LoopFigure | None


@dataclass(frozen=True)
class LeaderboardRow:
    run: str
    depth: int | None


@dataclass(frozen=True)
class Leaderboard:
    rows: list[LeaderboardRow]


@dataclass(frozen=True)
class P2Settings:
    """`papers.p2` (workflow/schemas/p2.schema.yaml, which holds every default)."""

    enabled: bool
    model: str
    dataset: str
    prompt_sets: dict[str, int | None]  # prompt set -> prompts taken (sets with categories: per category)
    max_new_tokens: int
    reference_extra_tokens: int
    loops: list[int]
    validation_windows: int
    validation_dataset: str | None  # a pretrain_text dataset read for validation windows (None: the stream's tail)
    method: dict[str, Any]  # P2Config keys
    train: dict[str, Any]  # TrainConfig keys
    launcher: dict[str, Any]
    runs: dict[str, Run]
    speed: Speed
    tables: Tables
    figures: Figures
    leaderboard: Leaderboard
    in_all: list[str] | None

    @property
    def bench(self) -> dict[str, int]:
        """The bench overrides `PaperPlan.bench_settings` reads: the speed experiments' (`speed.bench`)."""
        return self.speed.bench
