"""Paper 3: Table 1 (methods x BC x model), Table 2 (branching and mask count) or the pruning ablation, as CSV
(every number in its own column) and markdown (τ ± std per BC, forwards, tok/s, × greedy, identical).

snakemake.input.results  result JSONs of the table's settings and of their jobs' greedy references
snakemake.params.spec    name (table1 | table2 | pruning), settings (p3_plan.experiment_settings)
snakemake.output.csv/md  <stem>.csv and <stem>.md
"""

import logging

from mtp_core.io import log_to_file
from mtp_core.papers.p3.report import p3_table
from mtp_core.results import load_results, write_table_files

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
table = p3_table(spec["name"], load_results(list(smk.input.results)), spec["settings"])
write_table_files(table, smk.output.csv, smk.output.md)
logging.getLogger(__name__).info("%s: %d rows from %d results", smk.output.csv, len(table.data), len(smk.input.results))
