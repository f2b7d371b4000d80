"""Paper 2's training for the generic loop (`mtp_core.train.loop.train`): MTP / MTP-D heads and looped extension.

**What trains (`trunk`).** `frozen` (embedded default): only the heads, on the frozen trunk's h^0 (the paper's own
regime for looped extension, §3.3; the feature cache serves it); `last_layers`: the heads plus the trunk's last
`trunk_layers` decoder layers and final norm, with the main CE (embedding and lm_head frozen; the partial-joint
regime of the ablations where the main head must be able to move, Tables 2 and 6); `all`: everything, from
scratch (§4.1, paper scale). The shared embedding and lm_head are the trunk's (heads read them at call time).

**Looped extension with continued pre-training (§3.3, Fig. 2).** `extend: {heads: <dir>, new_heads, group,
source}`: the source run's heads grow by copies of a group (`DeepSeekMTPHeads.extend`); the trunk and the old
heads are frozen and only the new depths are scored (the same CE + KL loss, the main head as teacher).

`P2Step.state_dict` is the fingerprint of the frozen trunk and of the frozen heads, checked on resume: both are
rebuilt from their sources, not saved with every checkpoint. The export is one directory: the heads
(`heads.save_heads`, naming their trunk by fingerprint) and, when the trunk trained, its HF checkpoint beside
them (`decoder.heads` and `load_model(checkpoint=...)` then read the same directory).

**Under DDP and FSDP2 (`train.dist`).** `P2Model.forward` computes the loss (`chunked.p2_loss_hidden`), so that
everything the trained module owns runs inside its forward, and it projects the logits with the trunk's lm_head
itself. `trunk: all`: the trunk is the model's (FSDP2 shards its layers and the heads; the embedding, final norm
and lm_head are the root's, gathered for the forward and backward). `frozen`: the trunk is the step's frozen
module (`frozen_modules`): FSDP2 shards its decoder layers and keeps its embedding, final norm and lm_head whole
on every rank, which the heads then call directly; the export's twin of the model shares it, and the export
names it by the fingerprint taken before it was sharded. `last_layers`: the trunk's last layers and final norm
are the model's; the rest of the trunk stays whole and replicated (as under DDP), so that the export can write
the whole trained trunk from one rank.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...data.shards import TokenShards
from ...decoding.layers import causal_mask, rope, run_layers
from ...io import atomic_dir
from ...models.heads import load_heads, save_heads, trunk_fingerprint, trunk_info
from ...models.heads.deepseek import DeepSeekMTPHeads
from ...train.config import TrainConfig
from ...train.launch.methods import Inputs, TrainingMethod
from ...train.loop import MicroBatchSpec, StepContext, StepOutput, TrainResult, resolve_device, train
from .chunked import p2_loss_hidden
from .data import FeatureCache, Windows
from .losses import metric_names
from .settings import SETTINGS, P2Config

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------- model


class P2Model(nn.Module):
    """What the loop trains: the heads, plus the trunk's trained part (`last_layers`: its last layers and final
    norm; `all`: the whole trunk). The rest of the trunk is read at call time and never registered, so state
    dicts and checkpoints hold exactly what trains."""

    def __init__(self, trunk: nn.Module, heads: DeepSeekMTPHeads, cfg: P2Config, first_depth: int = 1):
        super().__init__()
        self.heads, self.cfg, self.first_depth = heads, cfg, first_depth
        object.__setattr__(self, "trunk", trunk)  # not a submodule
        n = trunk.config.num_hidden_layers
        if cfg.trunk == "all":
            self.main = trunk
        elif cfg.trunk == "last_layers":
            self.tail = nn.ModuleList(trunk.model.layers[n - cfg.trunk_layers :])
            self.norm = trunk.model.norm

    def hidden(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """h^0 of the batch's windows: cached features, the trunk's tail on its cached input, or the trunk."""
        ids = batch["ids"]
        if self.cfg.trunk == "all":
            return self.main.model(input_ids=ids).last_hidden_state
        if self.cfg.trunk == "frozen":
            if "h" in batch:
                return batch["h"]
            with torch.no_grad():
                return self.trunk.model(input_ids=ids).last_hidden_state
        h = batch["h"] if "h" in batch else self._tail_input(ids)
        pos = torch.arange(ids.shape[1], device=ids.device)[None].expand_as(ids)
        start = self.trunk.config.num_hidden_layers - self.cfg.trunk_layers
        mask = causal_mask(self.trunk, h, None, pos, start)
        h = run_layers(
            self.trunk, h, start, start + self.cfg.trunk_layers, pos=pos, mask=mask, rope=rope(self.trunk, h, pos)
        )
        return self.norm(h)

    def _tail_input(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = self.trunk.model(input_ids=ids, output_hidden_states=True)
        return out.hidden_states[self.trunk.config.num_hidden_layers - self.cfg.trunk_layers]

    def forward(self, batch: dict[str, torch.Tensor], step: int = 0) -> tuple[torch.Tensor, dict[str, Any]]:
        """(the loss of the batch's windows at optimiser step `step`, its metrics): `p2_loss` of the main logits Q
        and of the trained depths' logits P^first .. P^K, each projected on its scored positions only (`scored`),
        chunk by chunk (`chunked.p2_loss_hidden`, `cfg.loss.chunk_rows`)."""
        ids = batch["ids"]
        h0 = self.hidden(batch)
        hs = self.heads.forward_train(self.trunk, h0, ids)[self.first_depth - 1 :]
        out = p2_loss_hidden(self.trunk.lm_head, h0, hs, ids, self.cfg.loss, step, self.first_depth)
        return out.loss, out.metrics


# ------------------------------------------------------------------------------------------------- data


class P2Batches:
    """The loop's `BatchSource`: rows `spec.start ..` of the window stream, with their cached features."""

    def __init__(self, windows: Windows, features: FeatureCache | None = None):
        self.windows, self.features = windows, features

    def micro_batch(self, spec: MicroBatchSpec) -> dict[str, torch.Tensor]:
        batch = {"ids": torch.from_numpy(self.windows.train_rows(spec.start, spec.size))}
        if self.features is not None:
            batch["h"] = self.features.rows(spec.start, spec.size)
        return batch


# ------------------------------------------------------------------------------------------------- step


class P2Step:
    """The model's loss -> `StepOutput`; holds the frozen trunk (module docstring)."""

    def __init__(self, trunk: nn.Module, heads: DeepSeekMTPHeads, cfg: P2Config, first_depth: int, *, tokenizer=None):
        self.trunk, self.cfg, self.first_depth, self.tokenizer = trunk, cfg, first_depth, tokenizer
        self.metric_names = metric_names(first_depth, heads.num_heads)
        self._fingerprint = self._fingerprints(heads)
        self._trunk_info = trunk_info(trunk) if cfg.trunk == "frozen" else None  # before FSDP2 shards it

    @property
    def frozen_modules(self) -> tuple[str, ...]:
        """The loop's `wrap_frozen` list: the trunk when all of it is frozen (the module docstring says why not
        otherwise)."""
        return ("trunk",) if self.cfg.trunk == "frozen" else ()

    def _fingerprints(self, heads: DeepSeekMTPHeads) -> dict[str, Any]:
        frozen = [h for h in heads.heads[: self.first_depth - 1]]
        with torch.no_grad():
            old = float(sum(p.double().sum() + p.double().square().sum() for h in frozen for p in h.parameters()))
        return {"trunk": None if self.cfg.trunk == "all" else trunk_fingerprint(self.trunk), "frozen_heads": old}

    def setup(self, device: torch.device, dist: Any) -> None:
        self.trunk.to(device)

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor], ctx: StepContext) -> StepOutput:
        loss, metrics = model(batch, ctx.step)
        return StepOutput(loss=loss, metrics=metrics, tokens=batch["ids"].numel())

    def state_dict(self) -> dict[str, Any]:
        return {"fingerprints": self._fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("fingerprints")
        if saved is not None and saved["trunk"] != self._fingerprint["trunk"]:
            raise ValueError(f"the trunk differs from the one this checkpoint trained on ({saved['trunk']})")
        if saved is not None and abs(saved["frozen_heads"] - self._fingerprint["frozen_heads"]) > 1e-6 * max(
            1.0, abs(saved["frozen_heads"])
        ):
            raise ValueError("the frozen heads differ from those this checkpoint was extended from")

    def export(self, model: P2Model, path: str | os.PathLike) -> Path:
        """The heads, and the trained trunk's HF checkpoint when it trained, in one directory. `model`: the plain
        model, or under FSDP2 its twin holding the gathered weights, whose `trunk` holds the twin's trained layers
        (`train.dist._meta_twin`)."""
        info = {"trunk_trained": self.cfg.trunk != "frozen", "first_trained_depth": self.first_depth}
        if self.cfg.trunk == "frozen":
            return save_heads(model.heads, path, self._trunk_info, extra=info)
        with atomic_dir(path) as tmp:
            model.trunk.save_pretrained(tmp, safe_serialization=True)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp)
            save_heads(model.heads, tmp / "heads", model.trunk, extra=info)
        return Path(path)


def heads_dir(run_model_dir: str | os.PathLike) -> Path:
    """Where a run's export keeps its heads: the directory itself, or `heads/` beside a trained trunk."""
    p = Path(run_model_dir)
    return p / "heads" if (p / "heads").is_dir() else p


# ------------------------------------------------------------------------------------------------- entry


def build_heads(trunk: nn.Module, cfg: P2Config, extend: dict | None, seed: int) -> tuple[DeepSeekMTPHeads, int]:
    """New heads (seeded), or an extension of a run's heads; returns them with the first depth that trains."""
    if extend is None:
        torch.manual_seed(seed)
        return DeepSeekMTPHeads.from_trunk(trunk, cfg.num_heads, init=cfg.init, concat=cfg.concat), 1
    base = load_heads(heads_dir(extend["heads"]), trunk)
    if not isinstance(base, DeepSeekMTPHeads):
        raise ValueError(f"{extend['heads']}: {base.arch} heads cannot be extended")
    heads = base.extend(int(extend["new_heads"]), extend.get("group"), extend.get("source", "latest"))
    for h in heads.heads[: base.num_heads]:
        h.requires_grad_(False)
    return heads, base.num_heads + 1


def train_p2(
    loaded: Any,
    shards: str | os.PathLike,
    p2_cfg: P2Config | dict,
    train_cfg: TrainConfig | dict,
    out_dir: str | os.PathLike,
    *,
    features: str | os.PathLike | None = None,
    extend: dict | None = None,
    device: str | torch.device | None = None,
    dist: Any = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train MTP(-D) heads on the windows of `shards` (index.json) from a `LoadedModel`; resumes from
    `out_dir/checkpoints`. `features`: the feature cache of a frozen trunk; `extend`: looped extension."""
    cfg = p2_cfg if isinstance(p2_cfg, P2Config) else P2Config.from_dict(p2_cfg)
    tc = train_cfg if isinstance(train_cfg, TrainConfig) else TrainConfig.from_dict(train_cfg)
    trunk = loaded.model
    if extend is not None and cfg.trunk != "frozen":
        raise ValueError("looped extension trains new heads on a frozen trunk (trunk: frozen)")
    trunk.requires_grad_(cfg.trunk == "all")
    heads, first = build_heads(trunk, cfg, extend, tc.seed)
    model = P2Model(trunk, heads, cfg, first)
    if cfg.trunk == "last_layers":
        model.tail.requires_grad_(True)
        model.norm.requires_grad_(True)
    windows = Windows(TokenShards(shards), cfg.seq_len, cfg.val_tokens, cfg.window_seed)
    cache = None
    layer = cfg.feature_layer(trunk.config.num_hidden_layers)
    if features is not None and layer is not None:
        cache = FeatureCache.open(features, trunk, cfg.seq_len, layer, tc.max_steps * tc.global_batch_size)
    log.info(
        "P2 data: %d training windows of %d tokens (%d validation), K=%d, trunk %s, features %s",
        windows.n_train,
        cfg.seq_len,
        windows.n_val,
        heads.num_heads,
        cfg.trunk,
        features if cache is not None else "none",
    )
    step = P2Step(trunk, heads, cfg, first, tokenizer=loaded.tokenizer)
    return train(
        step,
        model,
        P2Batches(windows, cache),
        tc,
        out_dir,
        dist=dist,
        device=resolve_device(device),
        callbacks=callbacks,
    )


# -------------------------------------------------------------------------------------- launcher method `p2`


def _inputs(settings: dict) -> Inputs:
    """The trunk (a trunk-training run's export for an extension, `trunk_dir`), the shards, `features` and
    `extend`."""
    from ...models.load import load_model

    loaded = load_model(settings["model"], base_dir=settings.get("base_dir"), checkpoint=settings.get("trunk_dir"))
    return (loaded, settings["shards"]), {"features": settings.get("features"), "extend": settings.get("extend")}


LAUNCH = TrainingMethod(SETTINGS, train_p2, load=_inputs)
launch_entry = LAUNCH.entry
