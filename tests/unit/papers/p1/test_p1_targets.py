"""Paper 1's supervised targets that lie in a row's response: the response-share metrics of `p1_loss` at k = 4
against a hand-listed layout (`resp_share`, `resp@j`, `confidence_resp`, `acc_teacher_resp`: the training curves'
columns behind the response share in docs/papers/p1.md), and the response start of a chat row with and without a
template's default system turn (`models.load.without_default_system`, model spec `system_prompt: none`)."""

from __future__ import annotations

import math

import pytest
import torch

from mtp_core.models.load import CHATML_TEMPLATE, load_model, prepare_base_model, tiny_tokenizer, without_default_system
from mtp_core.papers.p1.losses import p1_loss
from mtp_core.papers.p1.masks import build_blocked_batch
from mtp_core.papers.p1.settings import P1LossConfig
from mtp_core.papers.p1.train import encode_examples
from tests.conftest import tiny_spec
from tests.unit.papers.p1.test_losses import Lookup

K = 4
MASK, PAD, V = 11, 2, 12
# S = 16 slots, M = 2 regions of width 8, k = 4 (P = 5 GT tokens, 3 masks per region), offset -1. Slot by slot,
# sources [0 1 2 3 | 4 5 6 (masks) | 4 5 6 7 8 | 9 10 11 (masks) | 9 (tail)]: region 0 ends its GT at source 3,
# region 1 at source 8; a region's 4 targets are the 4 tokens after its last GT token.
LAST_GT = [3, 8]
TARGETS = [[4, 5, 6, 7], [9, 10, 11, 12]]
# rows: true length, first response token, regions kept by the end rule (row 1 ends at source 6: the region whose
# targets reach past it, region 0, is its last supervised one)
LENGTHS, STARTS, KEPT = [20, 7, 14], [6, 5, 10], [[0, 1], [0], [0, 1]]


def _softmax(row: list[float]) -> list[float]:
    z = [math.exp(v) for v in row]
    return [v / sum(z) for v in z]


def _argmax(p: list[float]) -> int:
    return max(range(len(p)), key=p.__getitem__)


def test_response_share_of_the_supervised_targets_at_k4_by_hand():
    g = torch.Generator().manual_seed(3)
    student = Lookup(torch.randn(V, V, generator=g) * 2)
    teacher = Lookup(torch.randn(V, V, generator=g) * 2)
    rows = [torch.randint(3, 11, (n,), generator=g).tolist() for n in LENGTHS]
    batch = build_blocked_batch(
        rows, k=K, offset=-1, num_regions=2, seq_len=16, mask_id=MASK, pad_id=PAD, response_start=STARTS
    )
    out = p1_loss(student, teacher, batch, P1LossConfig(metrics_k_max=K))
    # by hand: per kept region, the student's rollout y' at [last GT token, mask, mask, mask] (a lookup model: the
    # logits of a slot are its input's row), the teacher's argmax student-forced at [last GT token, y'_1..y'_3],
    # and whether each target is a response token (its source position at or after the row's response start)
    resp, conf, agree = [], [], []
    for b, kept in enumerate(KEPT):
        for r in kept:
            p_s = [_softmax(student.table[t].tolist()) for t in [rows[b][LAST_GT[r]], MASK, MASK, MASK]]
            y = [_argmax(p) for p in p_s]
            t_arg = [_argmax(_softmax(teacher.table[t].tolist())) for t in [rows[b][LAST_GT[r]], *y[:-1]]]
            resp.append([pos >= STARTS[b] for pos in TARGETS[r]])
            conf.append([p[i] for p, i in zip(p_s, y)])
            agree.append([float(a == t) for a, t in zip(y, t_arg)])
    assert resp == [
        [False, False, True, True],
        [True] * 4,
        [False, True, True, True],
        [False] * 4,
        [False, True, True, True],
    ]
    n_resp = sum(map(sum, resp))  # 12 of the 5 regions x 4 = 20 supervised targets

    def ratio(name: str) -> float:
        total, count = out.metrics[name]
        return float(total) / count

    assert ratio("resp_share") == pytest.approx(n_resp / 20) == pytest.approx(0.6)
    assert [ratio(f"resp@{j}") for j in range(1, K + 1)] == pytest.approx([1 / 5, 3 / 5, 4 / 5, 4 / 5])
    flat = [(c, a, s) for cr, ar, sr in zip(conf, agree, resp) for c, a, s in zip(cr, ar, sr)]
    assert ratio("confidence_resp") == pytest.approx(sum(c for c, _, s in flat if s) / n_resp, rel=1e-6)
    assert ratio("acc_teacher_resp") == pytest.approx(sum(a for _, a, s in flat if s) / n_resp)
    assert ratio("confidence") == pytest.approx(sum(c for c, _, _ in flat) / 20, rel=1e-6)
    assert ratio("accepted_len") == pytest.approx(sum(sum(math.prod(a[: j + 1]) for j in range(K)) for a in agree) / 5)
    assert 0 < n_resp < 20 and 0 < sum(a for _, a, _ in flat) < 20  # the example discriminates
    # without response starts every supervised target counts as a response token
    plain = build_blocked_batch(rows, k=K, offset=-1, num_regions=2, seq_len=16, mask_id=MASK, pad_id=PAD)
    total, count = p1_loss(student, teacher, plain, P1LossConfig(metrics_k_max=K)).metrics["resp_share"]
    assert float(total) == count == 20


# ------------------------------------------------------------------------------------ the default system turn

# a ChatML template that writes a default system turn when the conversation has none (as SmolLM2's does)
DEFAULT_SYSTEM = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
    "{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# tokens of the tiny byte-level tokenizer, counted by hand: a marker is one token, every other character one byte
SYSTEM_TURN = 1 + len("system\nBe brief.") + 1 + 1
USER_TURN = 1 + len("user\nQ?") + 1 + 1
ASSISTANT_HEADER = 1 + len("assistant\n")


def test_response_start_with_and_without_the_default_system_turn():
    tok = tiny_tokenizer()
    tok.chat_template = DEFAULT_SYSTEM
    row = [{"query": "Q?", "response": "A."}]
    with_system = encode_examples(row, tok, "chat", 64)
    assert int(with_system.response_start[0]) == SYSTEM_TURN + USER_TURN + ASSISTANT_HEADER
    without_default_system(tok, "m")
    assert tok.chat_template == CHATML_TEMPLATE
    plain = encode_examples(row, tok, "chat", 64)
    assert int(plain.response_start[0]) == USER_TURN + ASSISTANT_HEADER
    assert int(plain.lengths[0]) == int(with_system.lengths[0]) - SYSTEM_TURN
    n = int(plain.lengths[0])
    assert plain.tokens[0, :n].tolist() == with_system.tokens[0, SYSTEM_TURN : SYSTEM_TURN + n].tolist()
    # a conversation with its own system turn renders as before
    own = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    before = tok.apply_chat_template(own, tokenize=False, chat_template=DEFAULT_SYSTEM)
    assert tok.apply_chat_template(own, tokenize=False) == before


def test_without_default_system_keeps_chatml_and_refuses_other_templates():
    tok = tiny_tokenizer()
    without_default_system(tok, "m")
    assert tok.chat_template == CHATML_TEMPLATE
    tok.chat_template = None
    without_default_system(tok, "m")
    assert tok.chat_template is None
    llama_like = (
        "{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] }}"
        "{% endfor %}"
    )
    # templates that differ from ChatML elsewhere than in the default turn: in a conversation's own system turn, in
    # the assistant's turn, in the generation prompt
    other_system = DEFAULT_SYSTEM.replace("{{ '<|im_start|>' + m['role']", "{{ '<|im_start|>' + m['role'] + ':'")
    other_assistant = DEFAULT_SYSTEM.replace(
        "'<|im_end|>\n' }}{% endfor %}",
        "('<|im_end|><|endoftext|>\n' if m['role'] == 'assistant' else '<|im_end|>\n') }}{% endfor %}",
    )
    other_prompt = DEFAULT_SYSTEM.replace("'<|im_start|>assistant\n' }}", "'<|im_start|>assistant\nSure.' }}")
    assert len({DEFAULT_SYSTEM, other_system, other_assistant, other_prompt}) == 4
    for template in (llama_like, other_system, other_assistant, other_prompt):
        tok.chat_template = template
        with pytest.raises(ValueError, match="model 'smol': system_prompt 'none' needs a ChatML chat template"):
            without_default_system(tok, "smol")
        assert tok.chat_template == template


@pytest.mark.parametrize("system_prompt, template", [("none", CHATML_TEMPLATE), ("default", DEFAULT_SYSTEM)])
def test_load_model_drops_the_default_system_turn_only_when_asked(tmp_path, system_prompt, template):
    spec = tiny_spec("llama", system_prompt=system_prompt)
    d = prepare_base_model(spec, tmp_path / "m")
    tok = tiny_tokenizer()
    tok.chat_template = DEFAULT_SYSTEM
    tok.save_pretrained(d)
    loaded = load_model(spec, base_dir=d)
    assert loaded.tokenizer.chat_template == template
    assert loaded.render("Q?").startswith("<|im_start|>system") == (system_prompt == "default")
