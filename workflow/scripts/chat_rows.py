"""The (query, response) training rows of a conversation dataset (kind sharegpt; Magpie at paper scale).

snakemake.params.spec        the dataset's config entry (`path`: hub ids / local files, absent = packaged ShareGPT;
                             `split`; `max_rows`)
snakemake.params.on_bad_row  error | skip
snakemake.output.train       results/data/<dataset>/train.jsonl (`query`, `response`), what trainings on rows read
snakemake.output.report      counts: conversations read, used, skipped and why
"""

from mtp_core.data.conversations import first_turn_rows, read_conversations
from mtp_core.io import ReadReport, atomic_write_json, atomic_write_jsonl, log_to_file

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
report = ReadReport(str(spec.get("path") or "packaged ShareGPT"))
rows, counts = first_turn_rows(read_conversations(spec, smk.params.on_bad_row, report), spec.get("max_rows"))
if not rows:
    raise ValueError(
        f"dataset {spec.get('path') or 'packaged ShareGPT'}: no conversation with a user turn and an answer"
    )
atomic_write_jsonl(smk.output.train, rows)
atomic_write_json(smk.output.report, {**counts, "skipped_bad_rows": report.skipped, "examples": report.examples})
