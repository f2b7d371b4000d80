"""Snakemake script: one figure from result JSONs, as PNG and PDF.

snakemake.input.results  list of result JSONs (schema: mtp_core.results.write)
snakemake.params.figure  figure name, a key of mtp_core.results.FIGURES: "decoding_speed"
snakemake.output.png     the PNG
snakemake.output.pdf     the PDF
snakemake.log            optional; the first file receives the log
"""

from mtp_core.io import log_to_file
from mtp_core.results import make_figure

if snakemake.log:
    log_to_file(snakemake.log[0])
make_figure(snakemake.params.figure, list(snakemake.input.results), snakemake.output.png, snakemake.output.pdf)
