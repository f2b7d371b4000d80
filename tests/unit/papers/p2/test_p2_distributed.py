"""Paper 2 under DDP and FSDP2 on 2 processes (gloo, CPU), as the rehearsal runs it: the curves and the export (the
heads, and the trunk's HF checkpoint when it trains) equal those of 1 process at the same global batch, for trunk
`all` (tiny scratch Qwen3 and GLM-4-MoE models, `source: scratch`), a looped extension on a frozen trunk and the
partial-joint `last_layers`; a killed FSDP2 run resumes to the uninterrupted run's weights, and its fingerprint check
still refuses other frozen heads; bf16 parameters under FSDP2 train and export. Every run uses a loss chunk smaller
than a window, so the chunked loss's recomputation runs under both strategies."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from mtp_core.data.shards import write_shards
from mtp_core.data.synthetic import synthetic_documents
from mtp_core.models.heads import load_heads
from mtp_core.models.load import load_model, prepare_base_model, tiny_tokenizer
from mtp_core.papers.p2.train import heads_dir, train_p2
from mtp_core.train import LocalDist, make_dist
from mtp_core.train.config import step_dir_name
from mtp_core.train.loop import StopTraining
from tests.unit.ranks import TOL, curves, max_diff, run_ranks, weights_diff

pytestmark = pytest.mark.usefixtures("one_thread")

SCRATCH = {"source": "scratch", "tokenizer": "tiny", "hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
           "head_dim": 8, "intermediate_size": 64, "max_position_embeddings": 256, "tie_word_embeddings": False,
           "dtype": "float32", "chat_template": False, "init_seed": 0}  # fmt: skip
SPECS = {
    "qwen3": {**SCRATCH, "name": "s-qwen3", "arch": "qwen3"},
    "glm4_moe": {**SCRATCH, "name": "s-glm", "arch": "glm4_moe",
                 "moe": {"num_experts": 4, "expert_hidden_size": 16, "top_k": 2, "num_shared_experts": 1, "dense_layers": 1}},
}  # fmt: skip
# seq_len 16 -> 15 targets per window; chunk_rows 6 with one window per micro-batch: chunks of 6, 6 and 3 targets
PRETRAIN = {"seq_len": 16, "val_tokens": 500, "num_heads": 2, "trunk": "all", "init": "normal", "feature_cache": False,
            "loss": {"topn": 16, "beta": 0.5, "chunk_rows": 6}}  # fmt: skip
FROZEN = {**PRETRAIN, "num_heads": 1, "trunk": "frozen", "init": "copy_last"}
EXTEND = {"new_heads": 2, "group": None, "source": "latest"}


def _train(**over) -> dict:
    """3 steps of 4 windows; an export after step 2 too (training goes on after it: the export's twin must leave
    the live model as it was)."""
    return {"max_steps": 3, "global_batch_size": 4, "micro_batch_size": 1, "lr": 3e-3, "warmup_steps": 1,
            "schedule": "wsd", "checkpoint_every": 0, "keep_last": 1, "progress": False, "log_every": 0,
            "grad_clip": 1.0, "save_steps": [2], **over}  # fmt: skip


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("p2dist")
    tok_dir = d / "tok"
    tiny_tokenizer().save_pretrained(tok_dir)
    models = {name: prepare_base_model(spec, d / name, (str(tok_dir), {})) for name, spec in SPECS.items()}
    write_shards(synthetic_documents(0), tiny_tokenizer(), d / "shards", 6000, 3000, tokenizer_name="tiny", source={})
    return {"dir": d, "models": models, "shards": d / "shards" / "index.json", "refs": {}}


def _rank_train(rank, world, strategy, spec, base_dir, shards, method, train, out_dir, extend, kill_at, fsdp_kw):
    """One rank of a paper-2 training (`strategy` none = one process); what each rank saw of its modules."""
    loaded = load_model(spec, base_dir=base_dir)
    dist = LocalDist() if strategy == "none" else make_dist(strategy, **(fsdp_kw or {}))
    trunk = loaded.model

    def kill(step, row):
        if step == kill_at:
            raise StopTraining

    try:
        res = train_p2(loaded, shards, method, train, out_dir, extend=extend, dist=dist, callbacks=[kill])
    except StopTraining:
        return {"killed": True}
    return {
        "resumed_from": res.resumed_from,
        "final_dir": res.final_dir,
        "trunk_layer_params": sorted({type(p).__name__ for p in trunk.model.layers.parameters()}),
        "trunk_embedding": type(trunk.get_input_embeddings().weight).__name__,
        "trunk_grads": any(p.grad is not None for p in trunk.parameters()),
    }


def _run(env, tmp_path, world, strategy, model="qwen3", method=PRETRAIN, train=None, name="run", extend=None,
         kill_at=None, fsdp_kw=None, dtype="float32"):  # fmt: skip
    out = tmp_path / name
    spec = {**SPECS[model], "dtype": dtype}
    args = (strategy, spec, env["models"][model], env["shards"], method, train or _train(), out, extend)
    return run_ranks(world, _rank_train, tmp_path, *args, kill_at, fsdp_kw), out


def _export(path) -> dict[str, dict[str, torch.Tensor]]:
    """The export's weights: heads, and the trunk's HF checkpoint when it trained."""
    out = {"heads": load_file(str(heads_dir(path) / "heads.safetensors"))}
    if (path / "model.safetensors").exists():
        out["trunk"] = load_file(str(path / "model.safetensors"))
    return out


def _reference(env, tmp_path_factory, key, **kw):
    """The one-process run of `key` (cached for the module: each test compares its 2-process runs with it)."""
    if key not in env["refs"]:
        env["refs"][key] = _run(env, tmp_path_factory.mktemp("ref"), 1, "none", **kw)[1]
    return env["refs"][key]


def _assert_same_run(one, two, metrics_from=("loss", "grad_norm")):
    c1, c2 = curves(one), curves(two)
    assert [(r["weight"], r["tokens"], r["lr"]) for r in c1] == [(r["weight"], r["tokens"], r["lr"]) for r in c2]
    cols = metrics_from + tuple(k for k in c1[0] if k.startswith(("ce@", "kl@", "loss_main")))
    d_curve = max_diff(c1, c2, cols)
    d_weights = 0.0
    for export in ("model", f"exports/{step_dir_name(2)}"):
        e1, e2 = _export(one / export), _export(two / export)
        assert e1.keys() == e2.keys()
        d_weights = max(d_weights, *(weights_diff(e1[k], e2[k]) for k in e1))
    print(f"2 vs 1 process: max |curve diff| {d_curve:.3g}, max |exported weight diff| {d_weights:.3g}")
    assert d_curve < TOL and d_weights < TOL


@pytest.mark.parametrize("model", ["qwen3", "glm4_moe"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_trunk_all_two_processes_match_one(env, tmp_path, tmp_path_factory, strategy, model):
    """Pretraining (trunk all, the paper's runs): same curve and export as one process; the export is the trained
    HF trunk with its heads beside it, and the heads load on it (fingerprint check)."""
    one = _reference(env, tmp_path_factory, f"all-{model}", model=model)
    _, two = _run(env, tmp_path, 2, strategy, model)
    _assert_same_run(one, two)
    trunk = load_model(SPECS[model], checkpoint=two / "model")
    assert load_heads(heads_dir(two / "model"), trunk.model).num_heads == 2
    assert "trunk" in _export(two / "model")


@pytest.fixture(scope="module")
def source_heads(env, tmp_path_factory):
    """A frozen-trunk K = 1 run (one process): the source of the looped extensions."""
    return _run(env, tmp_path_factory.mktemp("src"), 1, "none", method=FROZEN, train=_train(max_steps=2))[1] / "model"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_frozen_trunk_extension_two_processes_match_one(env, tmp_path, tmp_path_factory, source_heads, strategy):
    """Looped extension with continued pre-training (trunk and old heads frozen): same curve and heads as one
    process; the old head is the source's, bit for bit. Under FSDP2 the frozen trunk's decoder layers are sharded
    and its embedding is whole on every rank; it never receives a gradient."""
    ext = {**EXTEND, "heads": str(source_heads)}
    one = _reference(env, tmp_path_factory, "extend", method=FROZEN, extend=ext, train=_train(warmup_steps=0))
    ranks, two = _run(env, tmp_path, 2, strategy, method=FROZEN, extend=ext, train=_train(warmup_steps=0))
    _assert_same_run(one, two)
    old, new = _export(source_heads)["heads"], _export(two / "model")["heads"]
    assert all(torch.equal(v, new[k]) for k, v in old.items())
    assert "trunk" not in _export(two / "model")
    for r in ranks:
        assert not r["trunk_grads"]
        if strategy == "fsdp":
            assert r["trunk_layer_params"] == ["DTensor"] and r["trunk_embedding"] == "Parameter"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_last_layers_two_processes_match_one(env, tmp_path, tmp_path_factory, strategy):
    """The partial-joint regime (the trunk's last layer and final norm train): same curve and export (the whole
    trained trunk) as one process."""
    method = {**FROZEN, "trunk": "last_layers", "trunk_layers": 1, "loss": {**FROZEN["loss"], "detach": False}}
    one = _reference(env, tmp_path_factory, "last_layers", method=method)
    _, two = _run(env, tmp_path, 2, strategy, method=method)
    _assert_same_run(one, two)
    base = load_file(str(env["models"]["qwen3"] / "model.safetensors"))
    trained = _export(two / "model")["trunk"]
    changed = {k for k in base if not torch.equal(base[k], trained[k])}
    assert changed and all(k.startswith("model.layers.1.") or k == "model.norm.weight" for k in changed)


def test_fsdp_resume_after_a_kill_equals_the_uninterrupted_run(env, tmp_path, source_heads):
    """Kill FSDP2 runs after step 2 (last state: step 1 or 2), start them again: the curve and the export equal
    those of the uninterrupted FSDP2 run bit for bit (pretraining and extension). Resuming the extension from other
    source heads is refused by the frozen heads' fingerprint."""
    train = _train(max_steps=4, checkpoint_every=1)
    ext = {**EXTEND, "heads": str(source_heads)}
    for name, method, extend in (("all", PRETRAIN, None), ("ext", FROZEN, ext)):
        _, ref = _run(env, tmp_path, 2, "fsdp", method=method, train=train, name=f"{name}-ref", extend=extend)
        (killed, _), cut = _run(env, tmp_path, 2, "fsdp", method=method, train=train, name=name, extend=extend,
                                kill_at=2)  # fmt: skip
        assert killed == {"killed": True}
        (r0, _), cut = _run(env, tmp_path, 2, "fsdp", method=method, train=train, name=name, extend=extend)
        assert r0["resumed_from"] == 2
        assert curves(ref) == curves(cut)
        a, b = _export(ref / "model"), _export(cut / "model")
        assert all(torch.equal(a[part][k], b[part][k]) for part in a for k in a[part])
    other = _run(env, tmp_path, 1, "none", method={**FROZEN, "init": "normal"}, train=_train(max_steps=1), name="o")
    wrong = {**ext, "heads": str(other[1] / "model")}
    (killed, _), _ = _run(env, tmp_path, 2, "fsdp", method=FROZEN, train=train, name="w", extend=ext, kill_at=2)
    with pytest.raises(AssertionError, match="frozen heads differ"):
        _run(env, tmp_path, 2, "fsdp", method=FROZEN, train=train, name="w", extend=wrong)


@pytest.mark.parametrize(("model", "run"), [("qwen3", "all"), ("glm4_moe", "all"), ("qwen3", "extend")])
def test_fsdp_bf16_trains_and_exports(env, tmp_path, source_heads, model, run):
    """The paper config's precision: bf16 weights (GLM-4-MoE's router stays float32), autocast, FSDP2 gathering in
    bf16 and reducing in float32, over float32 master weights (train.param_dtype). The runs train 3 steps with
    finite losses, and the export loads: heads as their float32 masters, and the trained trunk with its heads."""
    method = PRETRAIN if run == "all" else FROZEN
    extend = {**EXTEND, "heads": str(source_heads)} if run == "extend" else None
    fsdp_kw = {"param_dtype": torch.bfloat16, "reduce_dtype": torch.float32}
    _, out = _run(env, tmp_path, 2, "fsdp", model, method, _train(precision="bf16"), extend=extend, fsdp_kw=fsdp_kw,
                  dtype="bfloat16")  # fmt: skip
    rows = curves(out)
    assert len(rows) == 3 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    exported = _export(out / "model")
    assert {v.dtype for v in exported["heads"].values()} == {torch.float32}
    if run == "all":
        trunk = load_model({**SPECS[model], "dtype": "bfloat16"}, checkpoint=out / "model")
        assert load_heads(heads_dir(out / "model"), trunk.model).num_heads == 2
