"""Paper 4: one of Tables 1-5 as CSV (every number) and markdown (the paper's layout).

snakemake.params.spec  kind quality (layout, columns, overall, metrics, titles, offsets: `P4Plan.table_params`) or speed
                       (the speed job's outputs and layer_costs)
snakemake.output       csv, md
"""

import logging

from mtp_core.io import log_to_file
from mtp_core.papers.p4.report import quality_table, speed_frame, speed_table
from mtp_core.results import write_table_files

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
if spec["kind"] == "speed":
    results = {(int(b), s): f for b, files in spec["outputs"].items() for s, f in zip(spec["settings"], files)}
    table = speed_table(speed_frame(results, {int(b): f for b, f in spec["layer_costs"].items()}))
else:
    table = quality_table(
        spec["layout"], spec["columns"], spec["overall"], spec["metrics"], spec["titles"], int(spec["offsets"])
    )
write_table_files(table, smk.output.csv, smk.output.md)
logging.getLogger(__name__).info("%s: %d rows", smk.output.csv, len(table.data))
