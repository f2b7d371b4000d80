"""Layer subsets by hand (`mtp_core.decoding.layers`) reproduce the model's own forward, with caches of different lengths."""

from __future__ import annotations

import pytest
import torch

from mtp_core.decoding import layers as L
from mtp_core.decoding.batch import left_pad, positions_from_mask
from mtp_core.models.load import tiny_model
from tests.conftest import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(params=["llama", "qwen3"])
def model(request):
    torch.manual_seed(0)
    return tiny_model(tiny_spec(request.param, num_layers=4)).eval()


def _manual(model, ids, mask2d, cache, start_pos, chunks):
    """Logits of `ids` fed in chunks of the given sizes through all layers, by hand."""
    out, at = [], 0
    for n in chunks:
        x = ids[:, at : at + n]
        pos = positions_from_mask(mask2d)[:, at : at + n] if mask2d is not None else torch.arange(at, at + n)[None]
        h = L.embed(model, x)
        m = L.causal_mask(model, h, cache, pos, 0, mask2d)
        h = L.run_layers(model, h, 0, L.num_layers(model), pos=pos, mask=m, rope=L.rope(model, h, pos), cache=cache)
        out.append(L.head(model, h))
        at += n
    return torch.cat(out, 1)


@torch.no_grad()
def test_manual_forward_equals_model(model):
    ids = torch.randint(3, 256, (1, 20))
    ref = model(ids).logits
    got = _manual(model, ids, None, L.new_cache(model), 0, [12, 1, 4, 3])
    assert torch.allclose(got, ref, atol=1e-5)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


@torch.no_grad()
def test_left_padded_batch_in_chunks(model):
    prompts = [list(range(5, 17)), list(range(40, 47))]
    ids, mask = left_pad(prompts, 0)
    ref = model(ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits
    got = _manual(model, ids, mask, L.new_cache(model), 0, [8, 1, 3])
    real = mask.bool()
    assert torch.allclose(got[real], ref[real], atol=1e-5)


@torch.no_grad()
def test_lagging_layers_catch_up(model):
    """Layers [2, 4) run every token; layers [0, 2) lag and then run the pending tokens in one chunk: their K/V and
    the late layers' output equal a plain forward (the refill of paper 4)."""
    ids = torch.randint(3, 256, (1, 10))
    full = L.new_cache(model)
    _manual(model, ids, None, full, 0, [10])
    cache = L.new_cache(model)
    _manual(model, ids[:, :6], None, cache, 0, [6])
    h_emb = L.embed(model, ids)
    for p in range(6, 9):  # late-only steps: layers 2-3 on the embedding of token p (values irrelevant here)
        pos = torch.tensor([[p]])
        h = h_emb[:, p : p + 1]
        m = L.causal_mask(model, h, cache, pos, 2)
        L.run_layers(model, h, 2, 4, pos=pos, mask=m, rope=L.rope(model, h, pos), cache=cache)
    assert [L.cached_length(cache, i) for i in range(4)] == [6, 6, 9, 9]
    pos = torch.arange(6, 10)[None]
    h = h_emb[:, 6:10]
    m = L.causal_mask(model, h, cache, pos, 0)
    assert m is not None  # a chunk on top of a cache needs a materialised mask
    L.run_layers(model, h, 0, 2, pos=pos, mask=m, rope=L.rope(model, h, pos), cache=cache)
    for i in range(2):
        assert torch.allclose(cache.layers[i].keys, full.layers[i].keys, atol=1e-6)
        assert torch.allclose(cache.layers[i].values, full.layers[i].values, atol=1e-6)


def test_unsupported_architecture_is_named():
    model = tiny_model(tiny_spec("llama"))
    model.config.model_type = "gpt2"
    with pytest.raises(L.UnsupportedModel, match="gpt2"):
        L.check_supported(model)


def _hooked(model) -> bool:
    """Whether transformers installed its output-capturing hooks (what `output_hidden_states` does, for good)."""
    return any(getattr(m, "_output_capturing_hooks_installed", False) for m in model.modules())


@torch.no_grad()
def test_logits_and_hidden_are_the_models_without_hooks(model):
    """The base model's last hidden state and the head on the kept rows: the forward's logits and
    `output_hidden_states[-1]`, bit for bit, on a left-padded batch, and no hook installed; without `hidden` the
    plain forward's logits and None."""
    ids, mask = left_pad([[5, 9, 14, 3, 7, 8], [11, 4, 6]], pad_id=0)
    inputs = dict(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask))
    got = {keep: L.logits_and_hidden(model, keep, True, **inputs) for keep in (0, 1, 4)}
    plain, none = L.logits_and_hidden(model, 2, False, **inputs)
    assert not _hooked(model) and none is None
    assert torch.equal(plain, model(**inputs, logits_to_keep=2).logits)
    for keep, (logits, hidden) in got.items():
        ref = model(**inputs, logits_to_keep=keep, output_hidden_states=True)
        assert torch.equal(logits, ref.logits) and torch.equal(hidden, ref.hidden_states[-1]), keep
    assert _hooked(model)  # the check above can see hooks


@torch.no_grad()
def test_logits_and_hidden_of_other_models_read_output_hidden_states():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32)).eval()
    ids = torch.randint(0, 64, (2, 7))
    logits, hidden = L.logits_and_hidden(model, 3, True, input_ids=ids)
    ref = model(input_ids=ids, logits_to_keep=3, output_hidden_states=True)
    assert torch.equal(logits, ref.logits) and torch.equal(hidden, ref.hidden_states[-1])
