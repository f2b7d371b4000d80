"""Paper 2's training through the one loop: a frozen trunk (and frozen old heads of a looped extension) never
change, a killed training resumes to identical weights, N = 1 is exactly the MTP baseline (beta 0), the feature
cache equals the live trunk, the partial-joint regime trains only the trunk's tail, fingerprints guard the trunk,
training learns, and the validation windows are the ones the config names."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from mtp_core.data.shards import TokenShards, write_shards
from mtp_core.data.synthetic import synthetic_documents
from mtp_core.models.heads import HeadsMismatch, load_heads, trunk_fingerprint
from mtp_core.models.load import load_model, prepare_base_model, tiny_tokenizer
from mtp_core.papers.p2.data import FeatureCache, Windows, trunk_features, validation_rows, write_features
from mtp_core.papers.p2.settings import P2Config, launch_check
from mtp_core.papers.p2.train import P2Step, heads_dir, train_p2
from mtp_core.train.curves import read_curves
from mtp_core.train.loop import StopTraining
from tests.conftest import tiny_spec

SPEC = tiny_spec("qwen3")
METHOD = {"seq_len": 32, "val_tokens": 1000, "num_heads": 2, "loss": {"topn": 16, "beta": 0.5}}


def train_cfg(steps: int, **over) -> dict:
    # fp32: the feature cache holds the fp32 trunk's features (`auto` computes in bf16 on a CPU with bf16)
    return {"max_steps": steps, "global_batch_size": 4, "micro_batch_size": 2, "lr": 3e-3, "warmup_steps": 1,
            "schedule": "wsd", "checkpoint_every": 0, "progress": False, "log_every": 0, "precision": "fp32",
            **over}  # fmt: skip


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("p2train")
    model_dir = prepare_base_model(SPEC, d / "model")
    write_shards(synthetic_documents(0), tiny_tokenizer(), d / "shards", 12000, 5000, tokenizer_name="tiny", source={})
    return {"dir": d, "model": model_dir, "shards": d / "shards" / "index.json"}


def loaded(env):
    return load_model(SPEC, base_dir=env["model"])


def state(path) -> dict[str, torch.Tensor]:
    return load_heads(heads_dir(path)).state_dict()


def test_frozen_trunk_and_resume(env, tmp_path):
    lm = loaded(env)
    before = copy.deepcopy(lm.model.state_dict())
    full = train_p2(lm, env["shards"], METHOD, train_cfg(4), tmp_path / "full")
    assert all(torch.equal(before[k], v) for k, v in lm.model.state_dict().items())  # the trunk never moved

    def kill(step, row):
        if step == 2:
            raise StopTraining

    with pytest.raises(StopTraining):
        train_p2(loaded(env), env["shards"], METHOD, train_cfg(4), tmp_path / "cut", callbacks=[kill])
    resumed = train_p2(loaded(env), env["shards"], METHOD, train_cfg(4), tmp_path / "cut")
    assert resumed.resumed_from == 2
    a, b = state(full.final_dir), state(resumed.final_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_n1_is_exactly_the_mtp_baseline(env, tmp_path):
    n1 = train_p2(
        loaded(env), env["shards"], {**METHOD, "loss": {"topn": 1, "beta": 1.0}}, train_cfg(3), tmp_path / "n1"
    )
    mtp = train_p2(
        loaded(env), env["shards"], {**METHOD, "loss": {"topn": 16, "beta": 0.0}}, train_cfg(3), tmp_path / "b0"
    )
    a, b = state(n1.final_dir), state(mtp.final_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    mtpd = train_p2(loaded(env), env["shards"], METHOD, train_cfg(3), tmp_path / "d")
    assert not all(torch.equal(a[k], v) for k, v in state(mtpd.final_dir).items())


def test_feature_cache_equals_live_trunk(env, tmp_path):
    lm = loaded(env)
    windows = Windows(TokenShards(env["shards"]), 32, 1000)
    write_features(lm.model, windows, 8, lm.model.config.num_hidden_layers, tmp_path / "f")
    cache = FeatureCache.open(tmp_path / "f", lm.model, 32, lm.model.config.num_hidden_layers, 8)
    live = trunk_features(lm.model, torch.from_numpy(windows.train_rows(2, 4)), lm.model.config.num_hidden_layers)
    torch.testing.assert_close(cache.rows(2, 4), live)
    torch.testing.assert_close(
        live, lm.model.model(input_ids=torch.from_numpy(windows.train_rows(2, 4))).last_hidden_state
    )
    a = train_p2(lm, env["shards"], METHOD, train_cfg(2), tmp_path / "cached", features=tmp_path / "f")
    b = train_p2(loaded(env), env["shards"], METHOD, train_cfg(2), tmp_path / "live")
    sa, sb = state(a.final_dir), state(b.final_dir)
    assert all(torch.allclose(sa[k], sb[k], atol=1e-5) for k in sa)
    with pytest.raises(ValueError, match="rows"):  # a run reading more rows than cached
        train_p2(loaded(env), env["shards"], METHOD, train_cfg(3), tmp_path / "more", features=tmp_path / "f")
    other = load_model(
        tiny_spec("qwen3", init_seed=3), base_dir=prepare_base_model(tiny_spec("qwen3", init_seed=3), tmp_path / "o")
    )
    with pytest.raises(ValueError, match="another trunk"):
        FeatureCache.open(tmp_path / "f", other.model, 32, other.model.config.num_hidden_layers, 8)


def test_extension_freezes_the_trunk_and_old_heads(env, tmp_path):
    src = train_p2(loaded(env), env["shards"], METHOD, train_cfg(2), tmp_path / "src")
    ext = {"heads": str(src.final_dir), "new_heads": 2, "group": None, "source": "latest"}
    out = train_p2(loaded(env), env["shards"], METHOD, train_cfg(2, warmup_steps=0), tmp_path / "ext", extend=ext)
    old, new = state(src.final_dir), state(out.final_dir)
    assert all(torch.equal(old[k], new[k]) for k in old)  # heads 1-2 exactly as the source trained them
    moved = [
        k for k in new if k.startswith("heads.2.") and not torch.equal(new[k], old[k.replace("heads.2.", "heads.0.")])
    ]
    assert moved  # head 3 started as a copy of head 1 and trained
    assert [c for c in read_curves(tmp_path / "ext" / "curves.csv")[0] if c.startswith("ce@")] == ["ce@3", "ce@4"]


def test_last_layers_trains_the_tail(env, tmp_path):
    lm = loaded(env)
    before = copy.deepcopy(lm.model.state_dict())
    method = {**METHOD, "trunk": "last_layers", "trunk_layers": 1, "loss": {"topn": 16, "detach": False}}
    out = train_p2(lm, env["shards"], method, train_cfg(2), tmp_path / "joint")
    after = lm.model.state_dict()
    last = f"model.layers.{lm.model.config.num_hidden_layers - 1}."
    changed = {k for k in after if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith(last) or k == "model.norm.weight" for k in changed)
    trained = load_model(SPEC, checkpoint=out.final_dir)  # the export: the trained trunk, its heads beside it
    heads = load_heads(heads_dir(out.final_dir), trained.model)
    assert heads.num_heads == 2 and trunk_fingerprint(trained.model) != trunk_fingerprint(loaded(env).model)
    with pytest.raises(HeadsMismatch):
        load_heads(heads_dir(out.final_dir), loaded(env).model)


def test_step_state_guards_the_trunk(env):
    a, b = (
        loaded(env),
        load_model(
            tiny_spec("qwen3", init_seed=5),
            base_dir=prepare_base_model(tiny_spec("qwen3", init_seed=5), env["dir"] / "other"),
        ),
    )
    from mtp_core.models.heads.deepseek import DeepSeekMTPHeads

    cfg = P2Config.from_dict(METHOD)
    saved = P2Step(a.model, DeepSeekMTPHeads.from_trunk(a.model, 2), cfg, 1).state_dict()
    with pytest.raises(ValueError, match="trunk differs"):
        P2Step(b.model, DeepSeekMTPHeads.from_trunk(b.model, 2), cfg, 1).load_state_dict(saved)


@pytest.mark.parametrize("trunk", ["frozen", "last_layers", "all"])
def test_model_loss_is_the_windows_loss(env, trunk):
    """`P2Model`'s forward is the loss: each depth projected on its scored positions only, in chunks of 6 rows (3
    targets of each of 2 windows); its loss, metrics and every trained gradient equal those of `p2_loss` on
    whole-window logits (K = 3, positions past a depth's window end included there)."""
    from mtp_core.models.heads.deepseek import DeepSeekMTPHeads
    from mtp_core.papers.p2.losses import p2_loss
    from mtp_core.papers.p2.train import P2Model

    lm = loaded(env)
    extra = {"trunk": "last_layers", "trunk_layers": 1} if trunk == "last_layers" else {"trunk": trunk}
    cfg = P2Config.from_dict({**METHOD, "num_heads": 3, **extra, "loss": {**METHOD["loss"], "chunk_rows": 6}})
    ids = torch.from_numpy(Windows(TokenShards(env["shards"]), 32, 1000).train_rows(0, 2))
    torch.manual_seed(0)
    lm.model.requires_grad_(trunk == "all")
    model = P2Model(lm.model, DeepSeekMTPHeads.from_trunk(lm.model, 3), cfg)
    if trunk == "last_layers":
        model.tail.requires_grad_(True)
    loss, metrics = model({"ids": ids}, 0)
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    h0 = model.hidden({"ids": ids})
    whole = [lm.model.lm_head(h) for h in model.heads.forward_train(lm.model, h0, ids)]
    ref = p2_loss(lm.model.lm_head(h0), whole, ids, cfg.loss)
    ref.loss.backward()
    torch.testing.assert_close(loss, ref.loss)
    assert list(metrics) == list(ref.metrics)
    for name, v in ref.metrics.items():
        torch.testing.assert_close(metrics[name].float(), v.float(), msg=name)
    assert got and all(torch.allclose(got[n], p.grad, atol=1e-6) for n, p in model.named_parameters() if n in got)


def test_launch_check_names_bad_settings(env):
    good = {
        "model": SPEC,
        "base_dir": str(env["model"]),
        "shards": str(env["shards"]),
        "train": train_cfg(1),
        "p2": METHOD,
    }
    assert launch_check(good)["shards"].endswith("index.json")
    with pytest.raises(ValueError, match="num_heads"):
        launch_check({**good, "p2": {**METHOD, "num_heads": 0}})
    with pytest.raises(ValueError, match="topn"):
        launch_check({**good, "p2": {**METHOD, "loss": {"topn": 0}}})
    with pytest.raises(ValueError, match="unknown"):
        launch_check({**good, "p2x": 1})


def test_training_learns(env, tmp_path):
    """40 steps of MTP-D (frozen trunk): head 1's CE and its KL to the main head both fall."""
    cfg = train_cfg(40, lr=5e-3, warmup_steps=2)
    train_p2(loaded(env), env["shards"], {**METHOD, "num_heads": 1}, cfg, tmp_path / "learn")
    rows = read_curves(tmp_path / "learn" / "curves.csv")

    def mean(col, part):
        return sum(float(r[col]) for r in part) / len(part)

    assert mean("ce@1", rows[-5:]) < mean("ce@1", rows[:5]) - 0.5
    assert mean("kl@1", rows[-5:]) < mean("kl@1", rows[:5]) - 0.2


def _stream(index) -> np.ndarray:
    """A shard stream's tokens read back from its files, without TokenShards."""
    meta = json.loads(index.read_text())
    return np.concatenate([np.fromfile(index.parent / s["file"], dtype=meta["dtype"]) for s in meta["shards"]])


def test_validation_windows_are_the_named_dataset_or_the_held_out_tail(env, tmp_path):
    """With a `validation_dataset`, its stream's first windows (text the trunk never saw); without, the first
    windows of the training stream's last `val_tokens`; more windows than there are is an error, not fewer rows."""
    write_shards(synthetic_documents(1), tiny_tokenizer(), tmp_path / "v", 3000, 5000, tokenizer_name="tiny", source={})
    val, spec = tmp_path / "v" / "index.json", {"seq_len": 32, "val_tokens": 1000, "window_seed": 0, "windows": 5}
    held, stream = _stream(val), _stream(env["shards"])
    np.testing.assert_array_equal(validation_rows(spec, env["shards"], val), held[:160].reshape(5, 32))
    np.testing.assert_array_equal(validation_rows(spec, env["shards"], None), stream[-1000:][:160].reshape(5, 32))
    with pytest.raises(ValueError, match="94 validation windows of 32 tokens asked, 93 there"):
        validation_rows({**spec, "windows": 94}, env["shards"], val)
    with pytest.raises(ValueError, match="32 validation windows of 32 tokens asked, 31 there"):
        validation_rows({**spec, "windows": 32}, env["shards"], None)
