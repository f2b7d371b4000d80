"""Paper 2: one table (`mtp_core.papers.p2.report`) from the result files its rule reads.

snakemake.params.spec  `P2Plan.report_params`: what it shows and where each file is
snakemake.output       csv, md
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p2.report import make_table

smk = snakemake
log_to_file(smk.log[0])
make_table(dict(smk.params.spec), smk.output.csv, smk.output.md)
