"""Paper 2: one figure (`mtp_core.papers.p2.figures`) from the result files its rule reads.

snakemake.params.spec  `P2Plan.report_params`: what it shows and where each file is
snakemake.output       png, pdf
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p2.figures import make_figure

smk = snakemake
log_to_file(smk.log[0])
make_figure(dict(smk.params.spec), smk.output.png, smk.output.pdf)
