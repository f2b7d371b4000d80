"""Offline stand-ins for the hub datasets of the paper config: a small local folder per hub id, laid out like the
hub repo (its file format, file names and columns) with a README.md whose YAML header declares the repo's
`configs` and their `data_files`, so that `datasets.load_dataset(<folder>, name=<config>, split=<split>)` reads it
exactly as it reads the repo, and so do our loaders and lm-eval's tasks (`mtp_core.evaluate.hub_data`). The rows
are synthetic (the word-problem generator of `mtp_core.data.synthetic` and small generators of the evaluation
formats): deterministic in the seed, shaped like the real data (GSM8K answers end "#### N", MetaMathQA responses
"The answer is: N" with types such as GSM_Rephrased / MATH_AnsAug, multiple-choice rows have a valid key, BBH
targets have the subtask's answer format), never the real data. Nothing is downloaded.

Repo layouts (from the hub repos' cards and file lists): MetaMathQA one JSON array; GSM8K `main/` and `socratic/`
parquet; FineWeb-Edu `sample/350BT/` parquet (config `sample-350BT`); AM-Thinking-v1-Distilled JSONL at the root,
one file per category (its file list could not be read: `math.jsonl` and `chat.jsonl` are our guess, the row shape
follows the team's AM-DeepSeek-R1-Distilled card: `conversations` of human/assistant turns with `info`); Magpie
`data/train-*.parquet`; AIME25 `test.jsonl`; GPQA one CSV per config (split train); BBH `<subtask>/test-*.parquet`;
IFEval `ifeval_input_data.jsonl` (split train); CNN/DailyMail `3.0.0/` parquet; ARC `ARC-Easy/` and `ARC-Challenge/`
parquet; WinoGrande `winogrande_xl/` parquet; CoQA `coqa_train.parquet` and `coqa_validation.parquet`.
"""

from __future__ import annotations

import csv
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from ...io import InputError, atomic_dir
from .bbh_rows import BBH_SUBTASKS, bbh_rows
from .eval_rows import (
    aime_rows,
    arc_rows,
    cnn_dailymail_rows,
    coqa_rows,
    gpqa_rows,
    ifeval_rows,
    winogrande_rows,
)
from .train_rows import am_thinking_rows, fineweb_rows, gsm8k_rows, magpie_rows, metamathqa_rows


@dataclass(frozen=True)
class Part:
    """One file of a stand-in: its config, split and file stem (AM-Thinking's category)."""

    config: str
    split: str
    stem: str


Rows = Callable[[Part, int, random.Random], list[dict]]  # (part, number of rows, rng) -> the rows of that file


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _write_json_array(path: Path, rows: list[dict]) -> None:
    path.write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


WRITERS = {".parquet": _write_parquet, ".jsonl": _write_jsonl, ".json": _write_json_array, ".csv": _write_csv}


@dataclass(frozen=True)
class DatasetStandin:
    """One hub dataset's stand-in: the files of each config and split (paths in the repo; the suffix is the
    format), and its rows. A split with several files shares its rows among them (each gets at least one)."""

    hub_id: str
    files: dict[str, dict[str, tuple[str, ...]]]  # config -> split -> files
    rows: Rows

    def write(self, out: Path, rows: int, seed: int) -> None:
        """Write every file and the README.md card into the (empty) folder `out`."""
        for config, splits in self.files.items():
            for split, paths in splits.items():
                for i, rel in enumerate(paths):
                    count = max(1, rows // len(paths) + (i < rows % len(paths)))
                    part = Part(config, split, Path(rel).name.split(".")[0])
                    rng = random.Random(f"mtp-hub-standin/{self.hub_id}/{config}/{split}/{part.stem}/{seed}")
                    path = out / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    WRITERS[path.suffix](path, self.rows(part, count, rng))
        (out / "README.md").write_text(self.card(rows, seed), encoding="utf-8")

    def card(self, rows: int, seed: int) -> str:
        """The dataset card: the `configs` header of the hub repo, then what this folder is."""
        configs = [
            {
                "config_name": config,
                "data_files": [{"split": split, "path": list(paths)} for split, paths in splits.items()],
            }
            for config, splits in self.files.items()
        ]
        header = yaml.safe_dump({"configs": configs}, sort_keys=False)
        return (
            f"---\n{header}---\n\nSynthetic offline stand-in for the hub dataset `{self.hub_id}` (seed {seed}, "
            f"{rows} rows per split), written by `mtp_core.data.hub`: the repo's files, configs and columns, none "
            "of its data.\n"
        )


def _per_split(configs: tuple[str, ...], splits: tuple[str, ...], path: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """The same file pattern for every config and split: `path` formatted with {config} and {split}."""
    return {c: {s: (path.format(config=c, split=s),) for s in splits} for c in configs}


PARQUET_SHARD = "{config}/{split}-00000-of-00001.parquet"
MAGPIE_FILES = {"default": {"train": ("data/train-00000-of-00001.parquet",)}}
GPQA_CONFIGS = ("gpqa_main", "gpqa_diamond", "gpqa_extended")
AM_CATEGORIES = ("math", "chat")

DATASET_STANDINS: dict[str, DatasetStandin] = {
    s.hub_id: s
    for s in (
        DatasetStandin(
            "meta-math/MetaMathQA",
            {"default": {"train": ("MetaMathQA-395K.json",)}},
            lambda p, n, rng: metamathqa_rows(n, rng),
        ),
        DatasetStandin(
            "openai/gsm8k",
            _per_split(("main", "socratic"), ("train", "test"), PARQUET_SHARD),
            lambda p, n, rng: gsm8k_rows(p.config, p.split, n, rng),
        ),
        DatasetStandin(
            "HuggingFaceFW/fineweb-edu",
            {"sample-350BT": {"train": ("sample/350BT/000_00000.parquet",)}},
            lambda p, n, rng: fineweb_rows(n, rng),
        ),
        DatasetStandin(
            "a-m-team/AM-Thinking-v1-Distilled",
            {"default": {"train": tuple(f"{c}.jsonl" for c in AM_CATEGORIES)}},
            lambda p, n, rng: am_thinking_rows(p.stem, n, rng),
        ),
        DatasetStandin(
            "Magpie-Align/Magpie-Pro-300K-Filtered",
            MAGPIE_FILES,
            lambda p, n, rng: magpie_rows("Magpie-Align/Magpie-Pro-300K-Filtered", n, rng),
        ),
        DatasetStandin(
            "Magpie-Align/Magpie-Reasoning-150K",
            MAGPIE_FILES,
            lambda p, n, rng: magpie_rows("Magpie-Align/Magpie-Reasoning-150K", n, rng),
        ),
        DatasetStandin(
            "math-ai/aime25",
            {"default": {"test": ("test.jsonl",)}},
            lambda p, n, rng: aime_rows(n, rng),
        ),
        DatasetStandin(
            "Idavidrein/gpqa",
            {c: {"train": (f"{c}.csv",)} for c in GPQA_CONFIGS},
            lambda p, n, rng: gpqa_rows(n, rng),
        ),
        DatasetStandin(
            "SaylorTwift/bbh",
            _per_split(tuple(BBH_SUBTASKS), ("test",), PARQUET_SHARD),
            lambda p, n, rng: bbh_rows(p.config, n, rng),
        ),
        DatasetStandin(
            "google/IFEval",
            {"default": {"train": ("ifeval_input_data.jsonl",)}},
            lambda p, n, rng: ifeval_rows(n, rng),
        ),
        DatasetStandin(
            "abisee/cnn_dailymail",
            _per_split(("3.0.0",), ("train", "validation", "test"), PARQUET_SHARD),
            lambda p, n, rng: cnn_dailymail_rows(n, rng),
        ),
        DatasetStandin(
            "allenai/ai2_arc",
            _per_split(("ARC-Challenge", "ARC-Easy"), ("train", "test", "validation"), PARQUET_SHARD),
            lambda p, n, rng: arc_rows(n, rng),
        ),
        DatasetStandin(
            "allenai/winogrande",
            _per_split(("winogrande_xl",), ("train", "validation", "test"), PARQUET_SHARD),
            lambda p, n, rng: winogrande_rows(p.split, n, rng),
        ),
        DatasetStandin(
            "EleutherAI/coqa",
            {"default": {s: (f"coqa_{s}.parquet",) for s in ("train", "validation")}},
            lambda p, n, rng: coqa_rows(p.split, n, rng),
        ),
    )
}


def write_dataset_standin(hub_id: str, out_dir: str | os.PathLike, rows: int, seed: int = 0) -> Path:
    """Write the stand-in of hub dataset `hub_id` into `out_dir` (atomically: the folder appears complete or not
    at all, replacing an older one): `rows` rows per split of every config (a split kept in several files gets
    at least one row per file), deterministic in `seed`. Returns `out_dir`."""
    if hub_id not in DATASET_STANDINS:
        raise InputError(f"no stand-in for hub dataset {hub_id!r} (stand-ins: {', '.join(sorted(DATASET_STANDINS))})")
    if rows < 1:
        raise InputError(f"stand-in of {hub_id}: rows must be at least 1, got {rows}")
    with atomic_dir(out_dir) as tmp:
        DATASET_STANDINS[hub_id].write(tmp, rows, seed)
    return Path(out_dir)
