"""Paper 5: Figures 1-5 in one job (`mtp_core.papers.p5.figures`): acceptance frontier (1), throughput frontier (2),
regimes (3), both frontiers for the other tasks (4, 5).

snakemake.input:  the frontier files of the figures' tasks (`results/analysis/p5/<heads>/<task>/...`)
snakemake.params: heads (whose frontiers), figures {fig: spec} (in the order of the outputs), titles {task: title}
snakemake.output: fig1..fig5 .png and .pdf, in `P5Plan.FIGURES` order
"""

import json
from pathlib import Path

from mtp_core.io import log_to_file
from mtp_core.papers.p5.figures import frontier_figure, regimes_figure

smk = snakemake
log_to_file(smk.log[0])
figs, titles = dict(smk.params.figures), dict(smk.params.titles)
dirs = {Path(f).parent.name: Path(f).parent for f in smk.input}  # task -> its frontier folder
outputs = list(smk.output)
kinds = {"fig1": "acceptance", "fig2": "throughput", "fig4": "both", "fig5": "both"}
for i, (name, spec) in enumerate(figs.items()):
    png, pdf = outputs[2 * i], outputs[2 * i + 1]
    if name == "fig3":
        summaries = {t: json.loads((dirs[t] / "regimes.json").read_text())["summary"] for t in spec["tasks"]}
        regimes_figure(summaries, titles, png, pdf)
    else:
        files = {k: str(dirs[spec["task"]] / f"{k}.json") for k in ("search", "self", "throughput")}
        frontier_figure(kinds[name], files, titles[spec["task"]], png, pdf)
