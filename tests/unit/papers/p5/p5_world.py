"""A tiny world for paper 5's unit tests, built once per session: the tiny Llama, prompts, the trunk's
self-distilled answers, and Medusa / Hydra++ / plain Hydra heads trained on them for a few dozen steps (enough
for drafts of every rank to be accepted, and missed)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from mtp_core.decoding import StopCriteria
from mtp_core.models.load import LoadedModel, load_model, prepare_base_model
from mtp_core.papers.p5.capture import greedy_trajectories
from mtp_core.papers.p5.selfdistill import SelfDistillData, write_selfdistill
from mtp_core.papers.p5.settings import HeadsTrainConfig
from mtp_core.papers.p5.train import train_heads
from mtp_core.train.config import TrainConfig
from tests.conftest import random_prompts, tiny_spec

WORDS = ["the", "cat", "sat", "on", "a", "mat", "12", "+", "7", "=", "dog", "ran", "x", "y"]
NEW_TOKENS = 20


@dataclass
class World:
    loaded: LoadedModel
    prompts: list[list[int]]
    root: Path
    data: SelfDistillData
    heads: dict[str, Path]  # medusa, hydra (with a prefix layer), hydra_plain


@lru_cache(maxsize=1)
def world() -> World:
    torch.manual_seed(0)
    root = Path(tempfile.mkdtemp(prefix="p5-world-"))
    atexit.register(shutil.rmtree, root, True)
    spec = tiny_spec("llama")
    loaded = load_model(spec, base_dir=prepare_base_model(spec, root / "model"))
    prompts = prompts_of(loaded.tokenizer, 12, seed=5)
    trajs = greedy_trajectories(loaded.model, loaded.tokenizer, prompts, NEW_TOKENS, StopCriteria(), batch_size=4)
    write_selfdistill(root / "sd", [{"id": f"p{i}", "task": "toy"} for i in range(len(trajs))], trajs, "tiny-llama")
    data = SelfDistillData.read(root / "sd")
    heads = {}
    for name, arch, k, steps, extra in (
        ("medusa", "medusa", 4, 40, {"draft_vocab": 200}),  # 4 deep: mc_sim_7b_63; a draft vocabulary
        ("hydra", "hydra", 3, 8, {"draft_vocab": 256}),
        ("hydra_plain", "hydra", 3, 8, {"prefix": False}),
    ):
        cfg = HeadsTrainConfig(arch=arch, num_heads=k, num_layers=1, holdout=0.0, loss="hard", **extra)
        tc = TrainConfig(
            max_steps=steps,
            global_batch_size=4,
            micro_batch_size=4,
            lr=1e-2,
            warmup_steps=2,
            weight_decay=0.0,
            checkpoint_every=0,
            progress=False,
            log_every=0,
        )
        train_heads(loaded.model, data, cfg, tc, root / name, trunk_name="tiny-llama")
        heads[name] = root / name / "model"
    return World(loaded, prompts, root, data, heads)


def prompts_of(tok, n: int, seed: int) -> list[list[int]]:
    return random_prompts(tok, n, seed, words=WORDS, lengths=(2, 9))
