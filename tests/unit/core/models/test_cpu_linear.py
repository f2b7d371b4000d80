"""Linear layers on oneDNN's packed weights (`mtp_core.models.cpu_linear`): the same products as `F.linear` in
inference, `F.linear` itself wherever a gradient is recorded or `torch.compile` traces, a fresh pack after the
weight changes, and `load_model` packing on the CPU unless the spec says `aten`."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

from mtp_core.models.cpu_linear import (
    CPU_LINEARS,
    DEFAULT_CPU_LINEAR,
    MIN_PACKED_WEIGHT,
    PackedLinear,
    pack_linears,
)
from mtp_core.models.load import load_model, prepare_base_model
from tests.conftest import tiny_spec
from tests.unit.core.config.schemas import schema_defs

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")


def _linear(n_in: int = 48, n_out: int = 80, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(0)
    layer = torch.nn.Linear(n_in, n_out, bias=bias)
    assert pack_linears(layer, min_weight=0) == 1 and type(layer) is PackedLinear
    return layer


@pytest.mark.parametrize("shape", [(1, 48), (2, 48), (8, 48), (300, 48), (3, 7, 48), (1, 1, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_inference_uses_the_pack_and_gives_f_linear_up_to_rounding(shape, bias):
    layer = _linear(bias=bias)
    x = torch.randn(*shape)
    with torch.inference_mode():
        got = layer(x)
    assert layer._packed is not None  # the packed path ran
    want = x @ layer.weight.detach().T + (layer.bias.detach() if bias else 0)  # by hand, not through F.linear
    assert got.shape == (*shape[:-1], 80)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_training_forward_is_f_linear_and_differentiates():
    layer = _linear()
    x = torch.randn(5, 48, requires_grad=True)
    y = layer(x)
    assert layer._packed is None and torch.equal(y, F.linear(x, layer.weight, layer.bias))
    y.sum().backward()
    assert layer.weight.grad is not None and x.grad is not None


def test_a_changed_weight_is_repacked():
    layer = _linear()
    x = torch.randn(4, 48)
    with torch.inference_mode():
        layer(x)
    with torch.no_grad():
        layer.weight.mul_(-2.0)  # an optimiser step, in place
    with torch.inference_mode():
        got = layer(x)
    torch.testing.assert_close(got, x @ layer.weight.detach().T + layer.bias.detach(), rtol=1e-5, atol=1e-5)
    layer.weight = torch.nn.Parameter(torch.randn(80, 48))  # a new tensor: new storage
    with torch.inference_mode():
        got = layer(x)
    torch.testing.assert_close(got, x @ layer.weight.detach().T + layer.bias.detach(), rtol=1e-5, atol=1e-5)


def test_copies_and_pickles_leave_the_pack_out():
    layer = _linear()
    x = torch.randn(3, 48)
    with torch.inference_mode():
        want = layer(x)
    twin = copy.deepcopy(layer)
    assert twin._packed is None and "_packed" not in pickle.loads(pickle.dumps(layer)).__dict__
    with torch.inference_mode():
        assert torch.equal(twin(x), want)
    assert set(layer.state_dict()) == {"weight", "bias"}


def test_compiled_graphs_keep_aten_linear():
    layer = _linear()
    graphs = []

    def capture(gm, _inputs):
        graphs.append(gm)
        return gm.forward

    with torch.inference_mode():
        torch.compile(layer, backend=capture, dynamic=False)(torch.randn(2, 48))
    torch._dynamo.reset()
    code = graphs[0].code
    assert "linear" in code and "mkldnn" not in code


def test_pack_linears_refuses_an_unknown_kernel_and_aten_packs_nothing():
    with pytest.raises(ValueError, match="cpu_linear"):
        pack_linears(torch.nn.Linear(2, 2), "mkl")
    layer = torch.nn.Linear(2, 2)
    assert pack_linears(layer, "aten", min_weight=0) == 0 and type(layer) is torch.nn.Linear


def test_only_weights_of_the_threshold_and_up_are_packed():
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 255), torch.nn.Linear(256, 511))
    assert MIN_PACKED_WEIGHT == 256 * 512 and pack_linears(model) == 1
    assert [type(m) is PackedLinear for m in model] == [True, False, False]


def test_the_schema_default_is_the_library_default():
    prop = schema_defs("config")["model"]["properties"]["cpu_linear"]
    assert prop["default"] == DEFAULT_CPU_LINEAR and tuple(prop["enum"]) == CPU_LINEARS


def test_load_model_packs_on_the_cpu_unless_the_spec_says_aten(tmp_path):
    spec = tiny_spec("qwen3", hidden_size=256, intermediate_size=512)  # MLP weights at the threshold, the rest below
    base = prepare_base_model(spec, tmp_path / "model")
    packed = load_model(spec, base_dir=base).model
    plain = load_model({**spec, "cpu_linear": "aten"}, base_dir=base).model
    big = [n for n, m in plain.named_modules() if isinstance(m, torch.nn.Linear) and m.weight.numel() >= 2**17]
    assert big and [n for n, m in packed.named_modules() if type(m) is PackedLinear] == big
    assert all(n.endswith(("gate_proj", "up_proj", "down_proj")) for n in big)
    assert not any(type(m) is PackedLinear for m in plain.modules())
    ids = torch.randint(3, 200, (2, 9))
    with torch.inference_mode():
        torch.testing.assert_close(packed(ids).logits, plain(ids).logits, rtol=1e-4, atol=1e-4)


def test_the_key_leaves_a_trainings_stamp_alone():
    from mtp_core.train.launch.records import trajectory_hash

    def stamp(**model) -> str:
        return trajectory_hash("sft", "mtp_core.train.sft:launch_entry", {"model": {"source": "tiny", **model}})

    assert stamp() == stamp(cpu_linear="onednn") == stamp(cpu_linear="aten")
    assert stamp(dtype="bfloat16") != stamp()  # a key a training step reads still counts
