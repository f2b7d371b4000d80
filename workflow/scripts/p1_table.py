"""Paper 1: one of Tables 1-5 from result JSONs, as CSV (raw numbers, every column) and markdown (the paper's
layout: block, setting, per task value ± stderr and Eff. k ± std).

snakemake.input.results  result JSONs of the table's runs and their step-0 baselines
snakemake.params.spec    runs (block order), tasks (column order), metrics ({task: metric key or None}),
                         titles ({run: block title})
snakemake.output.csv/md  <stem>.csv and <stem>.md
"""

import logging

from mtp_core.io import log_to_file
from mtp_core.papers.p1.report import p1_table
from mtp_core.results import load_results, write_table_files

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
table = p1_table(
    load_results(list(smk.input.results)),
    runs=spec["runs"],
    tasks=spec["tasks"],
    metrics=spec["metrics"],
    titles=spec["titles"],
)
write_table_files(table, smk.output.csv, smk.output.md)
logging.getLogger(__name__).info("%s: %d rows from %d results", smk.output.csv, len(table.data), len(smk.input.results))
