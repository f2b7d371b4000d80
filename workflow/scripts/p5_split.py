"""Paper 5: every task's disjoint test / calibration / training prompts (`mtp_core.papers.p5.splits`) and a report.

snakemake.input:   <dataset>_<split> (the math datasets' train / validation / test files), held_out_<set> (the
                   leaderboard's prompt files: no split holds their prompts)
snakemake.params:  tasks (papers.p5.tasks), seed, prompt_format, on_bad_row
snakemake.output:  <task>_<split> (JSONL per task and split), report
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p5.jobs import split_job
from mtp_core.papers.p5.splits import HELD_OUT

smk = snakemake
log_to_file(smk.log[0])
tasks = dict(smk.params.tasks)
math_files = {}
for spec in tasks.values():
    if spec["source"] == "math":
        d = spec["dataset"]
        math_files[d] = {s: smk.input[f"{d}_{s}"] for s in ("train", "validation", "test")}
split_job(
    tasks,
    smk.params.seed,
    {t: {s: smk.output[f"{t}_{s}"] for s in ("test", "calib", "train")} for t in tasks},
    smk.output.report,
    math_files=math_files,
    on_bad_row=smk.params.on_bad_row,
    prompt_format=smk.params.prompt_format,
    held_out=[path for name, path in smk.input.items() if name.startswith(HELD_OUT)],
)
