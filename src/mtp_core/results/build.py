"""The foundation's tables (decoding, evaluation) from result JSONs: `make_table`, what the workflow script
`make_tables.py` calls (its figures: `figures.make_figure`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import pandas as pd

from .read import load_results, metrics_frame
from .tables import Table, decoding_table, evaluation_table, write_table_files

TABLES: dict[str, Callable[[pd.DataFrame], Table]] = {
    "decoding": decoding_table,
    "evaluation": lambda frame: evaluation_table(metrics_frame(frame), frame),
}
log = logging.getLogger(__name__)


def make_table(name: str, results: Sequence[str | os.PathLike], csv: str, md: str) -> None:
    """Build table `name` (a key of TABLES) from result JSONs; write `csv` and `md` (same stem)."""
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; known: {sorted(TABLES)}")
    table = TABLES[name](load_results(results))
    write_table_files(table, csv, md)
    log.info("table %s: %d result files -> %d rows in %s, %s", name, len(results), len(table.data), csv, md)
