"""Training the heads: head j at position t is trained on the trunk's distribution at t + 1 + j (brute force, both
kinds), training learns, a run killed mid-way resumes to identical weights, the draft vocabulary, the held-out
split and the launcher settings check."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mtp_core.models.heads import load_heads
from mtp_core.models.heads.hydra import HydraHeads
from mtp_core.models.heads.medusa import MedusaHeads
from mtp_core.papers.p5.settings import HeadsTrainConfig, launch_check
from mtp_core.papers.p5.train import (
    HeadsBatches,
    HeadsObjective,
    draft_vocabulary,
    heads_accuracy,
    holdout_rows,
    train_heads,
)
from mtp_core.train.config import TrainConfig
from mtp_core.train.loop import StopTraining
from tests.unit.papers.p5.p5_world import world


def toy_batch(h: int = 64) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    tokens = torch.tensor([[5, 9, 11, 3, 7, 8, 0], [4, 6, 2, 12, 0, 0, 0]])
    return {
        "tokens": tokens,
        "hidden": torch.randn(2, 6, h),
        "length": torch.tensor([7, 4]),
        "start": torch.tensor([2, 3]),  # the answers: tokens 2.. of row 0, 3.. of row 1
    }


@pytest.mark.parametrize("arch", ["medusa", "hydra"])
def test_head_j_learns_the_distribution_at_t_plus_1_plus_j(arch):
    trunk = world().loaded.model
    cls = MedusaHeads if arch == "medusa" else HydraHeads
    extra = {} if arch == "medusa" else {"init": "hydra"}
    heads = cls.for_trunk(trunk, num_heads=3, **extra)
    batch = toy_batch()
    lm = trunk.get_output_embeddings()
    for j in range(3):
        weights = [float(i == j) for i in range(3)]
        obj = HeadsObjective(heads, HeadsTrainConfig(arch=arch, num_heads=3, head_weights=weights))
        obj.bind(trunk)
        loss, stats = obj(batch)
        terms = []
        for b in range(2):
            n, r = int(batch["length"][b]), int(batch["start"][b])
            for t in range(6):
                if not r <= t + 2 + j <= n - 1:
                    continue
                if arch == "medusa":
                    logits = heads.head_logits(batch["hidden"][b, t], j)
                else:  # e_t from the prefix layer over h_0 .. h_t alone, then root y_{t+1} .. y_{t+1+j}
                    h = batch["hidden"][b : b + 1, : t + 1]
                    e = heads.prefix_forward(h, torch.arange(t + 1)[None], None, None)[0, -1]
                    logits = heads.head_logits(j, e, heads.embed(batch["tokens"][b, t + 1 : t + 2 + j]))
                q = torch.softmax(lm(batch["hidden"][b, t + 1 + j]), -1)
                terms.append(-(q * torch.log_softmax(logits, -1)).sum())
        assert stats[j]["n"] == len(terms)
        torch.testing.assert_close(loss, torch.stack(terms).mean(), atol=1e-5, rtol=1e-5)


def small_train(max_steps: int, checkpoint_every: int = 0) -> TrainConfig:
    return TrainConfig(
        max_steps=max_steps,
        global_batch_size=4,
        micro_batch_size=2,
        lr=5e-3,
        warmup_steps=1,
        weight_decay=0.0,
        checkpoint_every=checkpoint_every,
        progress=False,
        log_every=0,
    )


def test_training_learns_and_reports_held_out_accuracy(tmp_path):
    w = world()
    cfg = HeadsTrainConfig(arch="hydra", num_heads=2, num_layers=1, holdout=0.25, draft_vocab=64)
    fresh = HeadsObjective(HydraHeads.for_trunk(w.loaded.model, num_heads=2, num_layers=1), cfg)
    fresh.bind(w.loaded.model)
    rows = list(range(len(w.data)))
    before = heads_accuracy(fresh, HeadsBatches(w.data, rows), rows)
    res = train_heads(w.loaded.model, w.data, cfg, small_train(30), tmp_path, trunk_name="tiny-llama")
    curves = pd.read_csv(tmp_path / "curves.csv")
    assert curves["loss"].iloc[-5:].mean() < 0.7 * curves["loss"].iloc[:5].mean()
    assert curves["top1_0"].iloc[-5:].mean() > curves["top1_0"].iloc[:5].mean()
    acc = res["heads_accuracy"]
    assert len(acc["top1"]) == 2 and all(a <= b for a, b in zip(acc["top1"], acc["top5"])) and acc["n"][0] > 0
    assert res["holdout_rows"] == len(holdout_rows(w.data, 0.25, 0)) > 0
    assert 0 < res["draft_vocab_coverage"] <= 1
    heads = load_heads(tmp_path / "model", w.loaded.model)  # the one save format, the trunk's fingerprint
    assert heads.out.vocab_ids.numel() == 64
    trained = HeadsObjective(heads, cfg)
    trained.bind(w.loaded.model)
    after = heads_accuracy(trained, HeadsBatches(w.data, rows), rows)
    assert after["top1"][0] > before["top1"][0]


def test_killed_training_resumes_to_identical_weights(tmp_path):
    w = world()
    cfg = HeadsTrainConfig(arch="hydra", num_heads=2, num_layers=2, dropout=0.1, holdout=0.0)
    train_heads(w.loaded.model, w.data, cfg, small_train(6, checkpoint_every=2), tmp_path / "straight")

    def kill(step, row):
        if step == 3:
            raise StopTraining

    with pytest.raises(StopTraining):
        train_heads(w.loaded.model, w.data, cfg, small_train(6, 2), tmp_path / "killed", callbacks=[kill])
    res = train_heads(w.loaded.model, w.data, cfg, small_train(6, 2), tmp_path / "killed")
    assert res["resumed_from"] == 3
    a = load_heads(tmp_path / "straight" / "model", w.loaded.model).state_dict()
    b = load_heads(tmp_path / "killed" / "model", w.loaded.model).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_draft_vocabulary_and_settings_check(tmp_path):
    w = world()
    ids = draft_vocabulary(w.data, range(len(w.data)), 8, 320, eos=[2])
    assert len(ids) == 8 and ids == sorted(ids) and 2 in ids
    counts = torch.zeros(320, dtype=torch.long)
    for r in w.data.rows:
        for t in r["tokens"][r["prompt_len"] :]:
            counts[t] += 1
    top = set(torch.argsort(counts, descending=True, stable=True)[:7].tolist())
    assert top <= set(ids) | {2}
    with pytest.raises(ValueError, match="unknown setting"):
        launch_check({"model": {}, "data": "x", "heads": {}, "train": {"max_steps": 1}, "bogus": 1})
    with pytest.raises(ValueError, match="heads.arch"):
        launch_check({"model": {}, "data": str(tmp_path), "heads": {"arch": "eagle"}, "train": {"max_steps": 1}})
    with pytest.raises(ValueError, match="data: .*missing does not exist"):
        launch_check({"model": {}, "data": str(tmp_path / "missing"), "heads": {}, "train": {"max_steps": 1}})
