"""Appendix A, entropy regimes (paper 5 Fig. 3; entmtp `hydra/log_heads.py` + its feature notebook): per decode
step of a Hydra trajectory, features known before the step and the step's accept length; (a) Pearson r of each
feature against the accept length within trajectories, (b) the AUROC of a small classifier of low-acceptance steps,
split by trajectory (sample), never by row.

Rows come from the exact simulation of the default tree (`mc_sim_7b_63`, as the paper logs it) on a calibration
table at temperature 0 (the rollout the decoder would make). Features at step k (state i, root x_s):
`block_start_entropy` = entropy (nats) of the root's trunk distribution; `entropy_smoothed_w{4,16}` = its
bias-corrected EMA over the trajectory's steps up to k, beta = 1 - 1/W; `prev_accept_ema` = EMA (span 8, alpha =
2 / 9, pandas `adjust=False`) of the accept lengths of steps before k; `prev_{3,5}_accept_avg`, `prev_5_accept_min`
= rolling mean / min over the last 3 / 5 steps (complete windows only, pandas' default). Target: the step's accept
length (bonus excluded).

Classifier (the notebook's; the paper uses dropout and early stopping on AUROC but its published text gives neither rate nor patience, so neither is used): the
standardised features above plus the entropy MACD (w4 - w16) and its distance to its EMA (span 4), one hidden
layer of 128 ReLU units, Adagrad lr 0.05, L2 1e-4, 800 full-batch steps, positive class weighted by
negatives / positives; test = 20 % of the trajectories (seed 0). Its target is `accept_length == target_accept`
with the public code's value 1 by default (bonus excluded; whether the code meant "no draft accepted" is not
recoverable: `target_accept: 0` asks that instead). AUROC by the Mann-Whitney statistic (ties count one half).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .calibration import PromptTable
from .frontier import States, accept_all, trajectory

FEATURES = (
    "prev_accept_ema",
    "prev_5_accept_avg",
    "prev_3_accept_avg",
    "prev_5_accept_min",
    "block_start_entropy",
    "entropy_smoothed_w4",
    "entropy_smoothed_w16",
)


def ema(x: np.ndarray, alpha: float, bias_correct: bool = False) -> np.ndarray:
    out = np.empty(len(x))
    m = 0.0 if bias_correct else (x[0] if len(x) else 0.0)
    for k, v in enumerate(x):  # trajectories are short (tens of steps)
        m = (1 - alpha) * m + alpha * v if (k or bias_correct) else v
        out[k] = m / (1 - (1 - alpha) ** (k + 1)) if bias_correct else m
    return out


def _rolling(x: np.ndarray, w: int, fn) -> np.ndarray:
    return np.array([fn(x[k - w : k]) if k >= w else np.nan for k in range(len(x))])


def step_rows(table: Sequence[PromptTable], paths: Sequence[Sequence[int]]) -> list[dict]:
    """One row per decode step of the tree's simulated rollout on every prompt (module docstring)."""
    states = States.of(table)
    acc = accept_all(states, paths)
    rows = []
    for p, steps in enumerate(trajectory(states, acc)):
        t = table[p]
        local = steps - states.start[p]
        a = acc[steps].astype(float)
        ent = t.entropy[local].astype(float)
        prev = np.concatenate([[np.nan], a[:-1]])
        prev_ema = np.concatenate([[np.nan], ema(a[:-1], 2 / 9)]) if len(a) > 1 else np.array([np.nan])
        feats = {
            "prev_accept_ema": prev_ema[: len(a)],
            "prev_5_accept_avg": _rolling(a, 5, np.mean),
            "prev_3_accept_avg": _rolling(a, 3, np.mean),
            "prev_5_accept_min": _rolling(a, 5, np.min),
            "block_start_entropy": ent,
            "entropy_smoothed_w4": ema(ent, 1 / 4, bias_correct=True),
            "entropy_smoothed_w16": ema(ent, 1 / 16, bias_correct=True),
        }
        macd = feats["entropy_smoothed_w4"] - feats["entropy_smoothed_w16"]
        extra = {"entropy_macd": macd, "entropy_macd_hist": macd - ema(macd, 2 / 5) if len(macd) else macd}
        for k in range(len(a)):
            row = {
                "sample_idx": p,
                "prompt_id": t.id,
                "step": k,
                "state": int(local[k]),
                "accept_length": a[k],
                "prev_accept": prev[k],
            }
            row.update({f: float(v[k]) for f, v in {**feats, **extra}.items()})
            rows.append(row)
    return rows


def pearson(rows: Sequence[dict], feature: str, target: str = "accept_length") -> tuple[float | None, int]:
    """Pearson r over rows where the feature is defined (None when constant or fewer than 3 rows), and n."""
    x = np.array([r[feature] for r in rows], dtype=float)
    y = np.array([r[target] for r in rows], dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3 or x[ok].std() == 0 or y[ok].std() == 0:
        return None, n
    return float(np.corrcoef(x[ok], y[ok])[0, 1]), n


def auroc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """Area under the ROC curve (Mann-Whitney U / (n_pos n_neg); ties one half); None without both classes."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return None
    ranks = _average_ranks(np.concatenate([pos, neg]))
    u = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


CLASSIFIER_FEATURES = (*FEATURES, "entropy_macd", "entropy_macd_hist")


def classifier_auroc(
    rows: Sequence[dict], target_accept: int = 1, test_fraction: float = 0.2, seed: int = 0, steps: int = 800
) -> dict:
    """The classifier of `accept_length == target_accept` (module docstring): AUROC on held-out trajectories."""
    x = np.array([[r[f] for f in CLASSIFIER_FEATURES] for r in rows], dtype=float)
    y = np.array([r["accept_length"] == target_accept for r in rows], dtype=float)
    sample = np.array([r["sample_idx"] for r in rows])
    ok = np.isfinite(x).all(1)
    x, y, sample = x[ok], y[ok], sample[ok]
    ids = np.unique(sample)
    rng = np.random.default_rng(seed)
    n_test = max(1, int(round(test_fraction * len(ids)))) if len(ids) > 1 else 0
    test_ids = set(rng.permutation(ids)[:n_test].tolist())
    test = np.array([s in test_ids for s in sample], dtype=bool)
    out = {
        "n_rows": int(len(y)),
        "n_test_rows": int(test.sum()),
        "n_samples": int(len(ids)),
        "positive_rate": float(y.mean()) if len(y) else None,
        "target_accept": target_accept,
        "auroc": None,
    }
    if not n_test or test.all() or len(np.unique(y[~test])) < 2:
        return out
    import torch  # the classifier's only: the figures and tables read FEATURES without it

    mu, sd = x[~test].mean(0), x[~test].std(0)
    sd[sd == 0] = 1.0
    xt = torch.tensor((x - mu) / sd, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.float32)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(xt.shape[1], 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    pos = float(yt[~torch.from_numpy(test)].sum())
    neg = float((~test).sum()) - pos
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(neg / max(pos, 1.0)))
    opt = torch.optim.Adagrad(net.parameters(), lr=0.05, weight_decay=1e-4)
    train_idx = torch.from_numpy(~test)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(net(xt[train_idx])[:, 0], yt[train_idx]).backward()
        opt.step()
    with torch.no_grad():
        scores = net(xt[torch.from_numpy(test)])[:, 0].numpy()
    out["auroc"] = auroc(scores, y[test].astype(bool))
    return out


def regime_summary(rows: Sequence[dict], target_accept: int = 1, seed: int = 0) -> dict:
    """Pearson r (and n) of every feature against the accept length, and the classifier's AUROC."""
    r = {f: pearson(rows, f) for f in FEATURES}
    return {
        "pearson": {f: v[0] for f, v in r.items()},
        "pearson_n": {f: v[1] for f, v in r.items()},
        "classifier": classifier_auroc(rows, target_accept, seed=seed),
        "n_steps": len(rows),
        "mean_accept": float(np.mean([x["accept_length"] for x in rows])) if rows else None,
    }
