"""The foundation's tables and figures (decoding, evaluation) from result JSONs: `make_table` / `make_figure`, what
the workflow scripts `make_tables.py` and `make_figures.py` call."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import pandas as pd

from .read import load_results, metrics_frame
from .figures import decoding_speed_figure
from .tables import Table, decoding_table, evaluation_table, write_table_files

TABLES: dict[str, Callable[[pd.DataFrame], Table]] = {
    "decoding": decoding_table,
    "evaluation": lambda frame: evaluation_table(metrics_frame(frame), frame),
}
FIGURES: dict[str, Callable[[pd.DataFrame, str, str], None]] = {"decoding_speed": decoding_speed_figure}
log = logging.getLogger(__name__)


def make_table(name: str, results: Sequence[str | os.PathLike], csv: str, md: str) -> None:
    """Build table `name` (a key of TABLES) from result JSONs; write `csv` and `md` (same stem)."""
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; known: {sorted(TABLES)}")
    table = TABLES[name](load_results(results))
    write_table_files(table, csv, md)
    log.info("table %s: %d result files -> %d rows in %s, %s", name, len(results), len(table.data), csv, md)


def make_figure(name: str, results: Sequence[str | os.PathLike], png: str, pdf: str) -> None:
    """Build figure `name` (a key of FIGURES) from result JSONs; write `png` and `pdf`."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    FIGURES[name](load_results(results), png, pdf)
    log.info("figure %s: %d result files -> %s, %s", name, len(results), png, pdf)
