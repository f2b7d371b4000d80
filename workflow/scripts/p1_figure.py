"""Paper 1: one figure as PNG and PDF.

snakemake.wildcards.figure  fig5 .. fig11
snakemake.params.spec       `P1Plan.report_params`: kind pareto (Figs 5, 9: accuracy vs acceleration of the final
                            students: runs, task, metric, titles) | dynamics (Figs 7-8, 10-11: over training
                            checkpoints: run, task, metric, titles, final_step) | confidence (Fig. 6, from the
                            analysis CSV: bins, papers.p1.figures.fig6)
snakemake.input             results (result JSONs) or csv (the confidence analysis)
snakemake.output            png, pdf
"""

import pandas as pd

from mtp_core.io import log_to_file
from mtp_core.papers.p1.figures import confidence_figure, dynamics_figure, pareto_figure
from mtp_core.results import load_results

smk = snakemake
log_to_file(smk.log[0])
spec, fig = dict(smk.params.spec), smk.wildcards.figure
kind = spec["kind"]
title = f"Paper 1, {fig.replace('fig', 'Figure ')}"
if kind == "confidence":
    confidence_figure(pd.read_csv(smk.input.csv), smk.output.png, smk.output.pdf, bins=int(spec["bins"]), title=title)
elif kind == "pareto":
    pareto_figure(
        load_results(list(smk.input.results)),
        smk.output.png,
        smk.output.pdf,
        runs=spec["runs"],
        task=spec["task"],
        metric=spec["metric"],
        titles=spec["titles"],
        title=title,
    )
elif kind == "dynamics":
    dynamics_figure(
        load_results(list(smk.input.results)),
        smk.output.png,
        smk.output.pdf,
        run=spec["run"],
        task=spec["task"],
        metric=spec["metric"],
        final_step=spec["final_step"],
        titles=spec["titles"],
        title=title,
    )
else:
    raise ValueError(f"unknown figure kind {kind!r}")
