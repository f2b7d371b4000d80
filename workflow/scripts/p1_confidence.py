"""Paper 1, Figure 6: student confidence vs teacher loss of the student's own k-token rollouts (validation).

snakemake.input.student   the run's final student (HF checkpoint with <MTP>)
snakemake.input.base      the prepared base checkpoint (gguf/tiny; absent for hub/local models): the teacher
snakemake.input.data      validation rows of the run's math dataset (`query`, `response`)
snakemake.params          model (base model name), method (the run's P1Config keys), spec (papers.p1.figures.fig6:
                          rows, k, batch_size, bins, seed), mask_seed, on_bad_row
snakemake.output.csv      one line per region (mtp_core.papers.p1.confidence.COLUMNS)
snakemake.output.summary  correlations, the binned curve and the settings
"""

import torch

from mtp_core.config.settings import model_spec
from mtp_core.data.rows import read_rows, resolve_template
from mtp_core.io import atomic_write_json, atomic_write_text, log_to_file
from mtp_core.models.load import load_model
from mtp_core.papers.p1.confidence import binned, confidence_vs_teacher_loss, correlations, response_regions
from mtp_core.papers.p1.mask_token import add_mask_token
from mtp_core.papers.p1.settings import P1Config
from mtp_core.papers.p1.train import encode_examples, max_row_tokens

smk = snakemake
log_to_file(smk.log[0])
torch.set_num_threads(smk.threads)
device = "cuda" if torch.cuda.is_available() else "cpu"
spec, cfg = dict(smk.params.spec), P1Config.from_dict(dict(smk.params.method))
rows = read_rows(smk.input.data, smk.params.on_bad_row)[: spec["rows"]]
mspec = model_spec(smk.config, smk.params.model)
student = load_model(mspec, checkpoint=smk.input.student, device=device)
teacher = load_model(mspec, base_dir=smk.input.get("base") or None, device=device)
mask_id = add_mask_token(teacher.model, teacher.tokenizer, seed=int(smk.params.mask_seed), cov_scale=cfg.mask_cov_scale)
if mask_id != student.model.config.mtp_mask_token_id:
    raise ValueError(f"teacher mask id {mask_id} != student's {student.model.config.mtp_mask_token_id}")
tok = student.tokenizer
pad_id = tok.pad_token_id if tok.pad_token_id is not None else student.eos_ids[0]
template = resolve_template(cfg.template, student.chat_template)
encoded = encode_examples(rows, tok, template, max_row_tokens(cfg), cfg.append_eos, pad_id)
k = int(spec.get("k") or cfg.k_max)
regions = confidence_vs_teacher_loss(
    student.model,
    teacher.model,
    encoded,
    seq_len=cfg.seq_len,
    num_regions=cfg.num_regions,
    k=k,
    mask_id=mask_id,
    pad_id=pad_id,
    batch_size=int(spec["batch_size"]),
    seed=int(spec["seed"]),
)
atomic_write_text(smk.output.csv, regions.to_csv(index=False, lineterminator="\n"))
frame = response_regions(regions)  # what Figure 6 shows: regions about answers, each context once
atomic_write_json(
    smk.output.summary,
    {
        "rows": len(rows),
        "regions_all": len(regions),
        "regions_in_response": int(regions["in_response"].astype(bool).sum()),
        "regions": len(frame),
        "k": k,
        "template": template,
        **correlations(frame),
        "binned": binned(frame, int(spec["bins"])).to_dict("records"),
    },
)
