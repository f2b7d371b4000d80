"""Paper 4: Figure 4 (speed-up by batch size per τ, from the speed job) or Figure 5 (training CE against training
tokens per run, with the log-linear fit written beside it).

snakemake.params  spec (`P4Plan.report_params`): kind fig4 (the speed job's outputs, settings, layer_costs) | fig5
                  (curves {title: [curves.csv, train_summary.json (the warm-up as run)]}, bins)
snakemake.output  png, pdf (fig5: fit)
"""

from mtp_core.io import atomic_write_json, log_to_file
from mtp_core.papers.p4.figures import scaling_figure, speedup_figure
from mtp_core.papers.p4.report import speed_frame, warmup_of

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
if spec["kind"] == "fig4":
    results = {(int(b), s): f for b, files in spec["outputs"].items() for s, f in zip(spec["settings"], files)}
    speedup_figure(
        speed_frame(results, {int(b): f for b, f in spec["layer_costs"].items()}), smk.output.png, smk.output.pdf
    )
else:
    fits = scaling_figure(
        {t: (p, warmup_of(s)) for t, (p, s) in spec["curves"].items()},
        int(spec["bins"]),
        smk.output.png,
        smk.output.pdf,
    )
    atomic_write_json(smk.output.fit, {"fit": "loss = intercept + slope * log10(tokens)", "runs": fits})
