"""Paper 3: one figure as PNG and PDF.

snakemake.wildcards.figure  fig2 | fig4 | fig5
snakemake.params.spec       `P3Plan.report_params`: kind category (Figs 4-5: per-category τ by method and BC; name,
                            settings) | alignment (Fig. 2, from the CSV; papers.p3.figures.fig2)
snakemake.input             results (result JSONs) or csv (the alignment analysis)
snakemake.output            png, pdf
"""

import pandas as pd

from mtp_core.io import log_to_file
from mtp_core.papers.p3.figures import alignment_figure, category_figure, layer_curves
from mtp_core.results import load_results

smk = snakemake
log_to_file(smk.log[0])
spec, fig = dict(smk.params.spec), smk.wildcards.figure
kind = spec["kind"]
title = f"Paper 3, {fig.replace('fig', 'Figure ')}"
if kind == "category":
    model = spec["settings"][0]["model"] if spec["settings"] else ""
    category_figure(
        load_results(list(smk.input.results)),
        spec["settings"],
        smk.output.png,
        smk.output.pdf,
        title=f"{title}: {model}",
    )
elif kind == "alignment":
    alignment_figure(
        layer_curves(pd.read_csv(smk.input.csv)), smk.output.png, smk.output.pdf, title=f"{title}: {spec['model']}"
    )
else:
    raise ValueError(f"unknown figure kind {kind!r}")
