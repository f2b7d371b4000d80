"""Snakemake script: one table from result JSONs, as CSV (raw numbers) and markdown (`mean ± err` cells).

snakemake.input.results  list of result JSONs (schema: mtp_core.results.write)
snakemake.params.table   table name, a key of mtp_core.results.TABLES: "decoding" | "evaluation"
snakemake.output.csv     <stem>.csv
snakemake.output.md      <stem>.md (same stem as the CSV)
snakemake.log            optional; the first file receives the log
"""

from mtp_core.io import log_to_file
from mtp_core.results import make_table

if snakemake.log:
    log_to_file(snakemake.log[0])
make_table(snakemake.params.table, list(snakemake.input.results), snakemake.output.csv, snakemake.output.md)
