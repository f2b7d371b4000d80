"""The leaderboard's table (CSV + markdown) or its speed-vs-quality figure (PNG + PDF), from the rows' results.

snakemake.input.results  every row's result JSON on every prompt set
snakemake.params.rows    the rows (mtp_core.bench.leaderboard.plan.job_rows: label, title, paper, ...), in table order
snakemake.params.kind    table | figure
snakemake.output         csv, md | png, pdf
"""

from mtp_core.bench.leaderboard.table import leaderboard_figure, leaderboard_table
from mtp_core.io import log_to_file
from mtp_core.results import load_results, write_table_files

smk = snakemake
log_to_file(smk.log[0])
frame = load_results(list(smk.input.results))
if smk.params.kind == "table":
    write_table_files(leaderboard_table(frame, smk.params.rows), smk.output.csv, smk.output.md)
else:
    leaderboard_figure(frame, smk.params.rows, smk.output.png, smk.output.pdf)
