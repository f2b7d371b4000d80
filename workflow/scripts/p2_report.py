"""Paper 2: one table or figure (`mtp_core.papers.p2.report` / `.figures`) from the result files its rule reads.

snakemake.params:  kind (table | figure), spec (P2Plan.report_params: what it shows and where each file is)
snakemake.output:  csv + md (tables) or png + pdf (figures)
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p2.figures import make_figure
from mtp_core.papers.p2.report import make_table

smk = snakemake
log_to_file(smk.log[0])
params = dict(smk.params.spec)
if smk.params.kind == "table":
    make_table(params, smk.output.csv, smk.output.md)
else:
    make_figure(params, smk.output.png, smk.output.pdf)
