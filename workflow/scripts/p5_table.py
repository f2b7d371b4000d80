"""Paper 5: Table 1 (methods x tasks: tok/s, speedups, τ, identical, simulated = actual) or Table 2 (biased vs self
mean accept of frontier trees), as CSV (every number) and markdown (`mtp_core.papers.p5.report`).

snakemake.wildcards.table  table1 | table2
snakemake.input.files      table 2: each task's search.json and self.json, in `table2.tasks` order
snakemake.params.spec      `P5Plan.report_params`: table 1's rows and checks {task: simulation check}; table 2's
                           section and titles {task: title}
snakemake.output           csv, md
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p5.report import table1, table2
from mtp_core.results import write_table_files

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
if smk.wildcards.table == "table1":
    table = table1(list(spec["rows"]), dict(spec["checks"]))
else:
    t2, files = spec["table2"], iter(smk.input.files)
    table = table2({t: (next(files), next(files)) for t in t2["tasks"]}, dict(spec["titles"]), t2["nodes"])
write_table_files(table, smk.output.csv, smk.output.md)
