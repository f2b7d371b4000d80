"""Paper 5: Table 1 (methods x tasks: tok/s, speedups, τ, identical, simulated = actual) or Table 2 (biased vs self
mean accept of frontier trees), as CSV (every number) and markdown (`mtp_core.papers.p5.report`).

snakemake.input:  table 2: each task's search.json and self.json (`P5Plan.table_inputs`), in `table2.tasks` order
snakemake.params: name (table1 | table2), rows (table 1's), checks {task: simulation check}, table2 (its spec),
                  table2_heads, titles {task: title}
snakemake.output: csv, md
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p5.report import table1, table2
from mtp_core.results import write_table_files

smk = snakemake
log_to_file(smk.log[0])
if smk.params.name == "table1":
    table = table1(list(smk.params.rows), dict(smk.params.checks))
else:
    spec, files = dict(smk.params.table2), iter(smk.input)
    table = table2({t: (next(files), next(files)) for t in spec["tasks"]}, dict(smk.params.titles), spec["nodes"])
write_table_files(table, smk.output.csv, smk.output.md)
