"""AR and CAR of MTP heads (paper 2 App. D, Eqs. 6-7) from an exact teacher-forced simulation of `mtp-spec`.

Why exact: in a step whose newest verified token is x_n, the D drafts come from depth k's state at position n-1,
whose inputs are verified tokens and the drafts d_1 .. d_{k-1}. Draft k is only compared (and can only be
accepted) when d_1 .. d_{k-1} were accepted, i.e. equal the greedy tokens x_{n+1} .. x_{n+k-1}; its inputs are
then exactly those of a teacher-forced forward of the heads over the greedy continuation. So one forward of the
trunk and the heads over prompt + greedy continuation gives, for every position p and depth k, whether head k's
prediction at p equals x_{p+k+1} (`match`), and the decoder's accepted count at every step follows by walking
the steps: m = the number of leading depths that match at position n-1 (at most D), then n += m + 1, until the
stop criteria (the decoder's own `StopTracker`) end the row. The last step counts in full; the continuation
must therefore run D + 1 tokens past the budget, ignoring stops. The budget is on verified tokens, as a decoder
emits them: Algorithm 1's loop (`while L_gen < N`) counts its K pending drafts in L_gen, so it stops verifying
once verified tokens + K reach N. Ours is Algorithm 1 with a budget of N + D: a step or two more per sample at its
end (all drafts accepted, D 4, N 100: 20 verifications against 19), counted in AR, CAR and C_step alike.

The counters these steps give, and AR and CAR from them: `counters`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ...decoding.base import StopCriteria
from ...decoding.stopping import StopTracker
from ...models.heads.deepseek import DeepSeekMTPHeads


@torch.inference_mode()
def teacher_forced_match(
    trunk: torch.nn.Module, heads: DeepSeekMTPHeads, ids: Sequence[int], start: int, depths: int
) -> np.ndarray:
    """[D, T] bool: whether depth k (row k-1) at position p predicts x_{p+k+1} of `ids` (prompt + continuation,
    T tokens), for p >= `start` (earlier columns False); depths > K loop the heads. Logits only at p >= start."""
    dev = next(trunk.parameters()).device
    x = torch.tensor([list(ids)], device=dev)
    t = x.shape[1]
    h0 = trunk.model(input_ids=x).last_hidden_state
    out = np.zeros((depths, t), dtype=bool)
    for k, h in enumerate(heads.forward_train(trunk, h0, x, depths=depths), start=1):
        last = t - 2 - k  # the last position whose target x_{p+k+1} exists
        if last < start:
            continue
        pred = trunk.lm_head(h[0, start : last + 1]).argmax(-1)
        out[k - 1, start : last + 1] = (pred == x[0, start + k + 1 : last + k + 2]).cpu().numpy()
    return out


def simulate_steps(
    match: np.ndarray,
    ids: Sequence[int],
    prompt_len: int,
    depths: int,
    max_new_tokens: int,
    stop: StopCriteria,
    tokenizer,
) -> list[int]:
    """The accepted count m of every verification step of `mtp-spec` with D = `depths` drafts (module
    docstring); `ids` = prompt + greedy continuation (ignoring stops, >= D + 1 tokens past the budget)."""
    tracker = StopTracker(1, stop, tokenizer, max_new_tokens)
    n = prompt_len  # x_n: the token the prefill emitted
    tracker.feed(0, [ids[n]])
    steps: list[int] = []
    while not tracker.done(0):
        if n + depths + 1 > len(ids):
            raise ValueError(f"the continuation ends at token {len(ids)}: a step at {n} needs {n + depths + 1}")
        m = 0
        while m < depths and match[m, n - 1]:
            m += 1
        tracker.feed(0, ids[n + 1 : n + m + 2])
        steps.append(m)
        n += m + 1
    return steps
