"""Paper 1's objective moves the student (issue: "a test that training learns"): a tiny model first learns periodic
text by next-token fine-tuning (the teacher it will copy), then trains with the student-forced hard-teacher loss
(§3.3) for a few dozen steps; the first mask's accuracy on the token after next and ConfAdapt's effective k on
held-out prompts rise, and with the optimiser not stepping (lr 0) they do not."""

from __future__ import annotations

import copy

import pytest
import torch

from mtp_core.decoding import build_decoder
from mtp_core.models.load import LoadedModel, tiny_model, tiny_tokenizer
from mtp_core.papers.p1.losses import p1_loss
from mtp_core.papers.p1.masks import build_blocked_batch
from mtp_core.papers.p1.settings import P1Config, P1LossConfig
from mtp_core.papers.p1.train import encode_examples, max_row_tokens, train_p1
from mtp_core.train.sft import train_sft
from tests.conftest import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")
DIGITS = "0123456789"
P1 = {"seq_len": 32, "k_max": 4, "num_regions": 4, "template": "plain"}


def _rows(starts: range, length: int = 60) -> list[dict]:
    """Rows of the periodic text 0123456789012..., starting at digit s."""
    return [{"query": "c", "response": "".join(DIGITS[(s + i) % 10] for i in range(length))} for s in starts]


def _loaded(model, tok) -> LoadedModel:
    return LoadedModel("tiny", model, tok, chat_template=False, eos_ids=(tok.eos_token_id,))


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """The tiny model after next-token fine-tuning on periodic text: it continues any stretch of digits."""
    torch.manual_seed(0)
    model, tok = tiny_model(tiny_spec("llama")), tiny_tokenizer()
    loaded = _loaded(model, tok)
    train = {
        "max_steps": 40,
        "global_batch_size": 8,
        "micro_batch_size": 8,
        "lr": 3e-3,
        "warmup_steps": 2,
        "checkpoint_every": 0,
        "progress": False,
        "log_every": 0,
    }
    train_sft(
        loaded,
        _rows(range(10)),
        {"max_tokens": 64, "template": "plain", "loss_on": "all"},
        train,
        tmp_path_factory.mktemp("sft"),
    )
    return loaded


def _measure(loaded: LoadedModel, base: torch.nn.Module) -> tuple[float, float]:
    """(first-mask accuracy on the token after next, over held-out rows; ConfAdapt τ 0.9 tokens per forward)."""
    cfg = P1Config.from_dict(P1)
    enc = encode_examples(_rows(range(3, 8), 40), loaded.tokenizer, "plain", max_row_tokens(cfg))
    batch = build_blocked_batch(
        enc.tokens,
        lengths=enc.lengths,
        k=4,
        offset=0,
        num_regions=4,
        seq_len=32,
        mask_id=loaded.model.config.mtp_mask_token_id,
        pad_id=loaded.tokenizer.pad_token_id,
    )
    with torch.no_grad():
        out = p1_loss(loaded.model, base, batch, P1LossConfig(attention="dense"))
    acc2 = float((out.student_tokens[:, 1] == batch.targets[batch.supervised][:, 1]).float().mean())
    dec = build_decoder("conf-adapt", loaded.model, loaded.tokenizer, tau=0.9, k_max=4)
    prompts = [loaded.encode("c\n\n" + DIGITS[s:] + DIGITS[:s], chat=False) for s in (2, 5)]
    gens = dec.generate(prompts, 24, loaded.stop_criteria())
    return acc2, sum(len(g.tokens) for g in gens) / sum(g.forward_passes for g in gens)


@pytest.mark.parametrize("lr", [3e-3, 0.0])
def test_the_objective_moves_the_student(tmp_path, teacher, lr):
    student = _loaded(copy.deepcopy(teacher.model), copy.deepcopy(teacher.tokenizer))
    base = copy.deepcopy(teacher.model).eval()
    train = {
        "max_steps": 60,
        "global_batch_size": 8,
        "micro_batch_size": 8,
        "lr": lr,
        "warmup_steps": 2,
        "checkpoint_every": 0,
        "progress": False,
        "log_every": 0,
    }
    train_p1(student, _rows(range(10)), P1, train, tmp_path / "p1", mask_seed=0)  # adds <MTP> to the student
    # the same student before training: the teacher's weights with the same <MTP> row (same seed)
    from mtp_core.papers.p1.mask_token import add_mask_token

    before = _loaded(copy.deepcopy(teacher.model), copy.deepcopy(teacher.tokenizer))
    add_mask_token(before.model, before.tokenizer, seed=0)
    acc_before, k_before = _measure(before, base)
    acc_after, k_after = _measure(student, base)
    if lr:
        assert acc_after >= acc_before + 0.4, (acc_before, acc_after)
        assert k_after >= k_before + 0.5, (k_before, k_after)
    else:  # a step that does not move the weights learns nothing
        assert acc_after == acc_before and k_after == k_before
