"""Seed-grouped train/validation split (MetaMathQA and the synthetic data alike).

MetaMathQA (Yu et al. 2023) augments each seed question several times; a row's `original_question` names its
seed. Splitting by row would leak a seed's augmentations into validation, so whole groups go to one split.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

GROUP_KEY = "original_question"


class SplitError(ValueError):
    """A split that violates the grouping (a seed group in both splits)."""


def validation_group_count(n_groups: int, fraction: float) -> int:
    """round(fraction * n_groups), but at least one group on each side when there are two or more."""
    if n_groups < 2:
        return 0
    return min(max(round(fraction * n_groups), 1), n_groups - 1)


def split_by_group(
    rows: Sequence[dict], validation_fraction: float, split_seed: int, key: str = GROUP_KEY
) -> tuple[list[dict], list[dict]]:
    """(train, validation): each group of rows sharing `key` lands wholly in one split.

    Deterministic: the sorted group keys are shuffled with `random.Random(split_seed)` and the first
    `validation_group_count` groups form validation. Rows keep their input order within each split.
    """
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    keys = sorted({row[key] for row in rows})
    random.Random(split_seed).shuffle(keys)
    val_keys = set(keys[: validation_group_count(len(keys), validation_fraction)])
    train = [row for row in rows if row[key] not in val_keys]
    validation = [row for row in rows if row[key] in val_keys]
    return train, validation


def _counts(rows: Sequence[dict], key: str, grouped: bool = True) -> dict:
    out: dict = {"rows": len(rows)}
    if grouped:
        out["groups"] = len({row[key] for row in rows})
    out["types"] = dict(sorted(Counter(row["type"] for row in rows).items()))
    return out


def split_report(
    train: Sequence[dict],
    validation: Sequence[dict],
    test: Sequence[dict] = (),
    skipped_rows: int = 0,
    key: str = GROUP_KEY,
) -> dict:
    """Rows, groups and per-type counts per split, the number of groups found in both train and validation
    (checked, must be 0: SplitError otherwise) and how many test questions are a train/validation question, a
    seed's or any augmentation's query (a rephrasing too), word for word."""
    train_groups = {row[key] for row in train}
    val_groups = {row[key] for row in validation}
    crossing = len(train_groups & val_groups)
    if crossing:
        raise SplitError(f"{crossing} groups of {key!r} are in both train and validation")
    seen = train_groups | val_groups | {row["query"] for rows in (train, validation) for row in rows}
    return {
        "group_key": key,
        "splits": {
            "train": _counts(train, key),
            "validation": _counts(validation, key),
            "test": _counts(test, key, grouped=False),
        },
        "groups_crossing": crossing,
        "test_questions_in_train_or_validation": sum(row["query"] in seen for row in test),
        "skipped_rows": skipped_rows,
    }
