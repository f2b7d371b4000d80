"""Paper 5: Figures 1-5 in one job (`mtp_core.papers.p5.report`): acceptance frontier (1), throughput frontier (2),
regimes (3), both frontiers for the other tasks (4, 5).

snakemake.params: heads (whose frontiers), figures {fig: spec}, titles {task: title}
snakemake.output: fig1..fig5 .png and .pdf, in plan.FIGURES order
"""

import json
from pathlib import Path

from mtp_core.io import log_to_file
from mtp_core.papers.p5 import plan
from mtp_core.papers.p5.report import frontier_figure, regimes_figure

smk = snakemake
log_to_file(smk.log[0])
figs, titles, heads = dict(smk.params.figures), dict(smk.params.titles), smk.params.heads
outputs = list(smk.output)
kinds = {"fig1": "acceptance", "fig2": "throughput", "fig4": "both", "fig5": "both"}
for i, name in enumerate(plan.FIGURES):
    png, pdf = outputs[2 * i], outputs[2 * i + 1]
    if name == "fig3":
        summaries = {
            t: json.loads(Path(f"{plan.analysis_dir(heads, t)}/regimes.json").read_text())["summary"]
            for t in figs[name]["tasks"]
        }
        regimes_figure(summaries, titles, png, pdf)
    else:
        task = figs[name]["task"]
        d = plan.analysis_dir(heads, task)
        files = {k: f"{d}/{k}.json" for k in ("search", "self", "throughput")}
        frontier_figure(kinds[name], files, titles[task], png, pdf)
