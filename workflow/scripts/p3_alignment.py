"""Paper 3, Figure 2's analysis: per layer, the cosine similarity of each mask token's hidden state with that of
the next true token, for masks whose prediction is accepted vs rejected (`mtp_core.papers.p3.alignment`).

snakemake.input:   model (prepared checkpoint dir, absent for hub/local models), prompts (prompt-set JSONL)
snakemake.params:  spec (papers.p3.figures.fig2: model, probing, topk, prompts per category), per_category and
                   max_new_tokens (paper 3's defaults)
snakemake.output:  csv (one row per mask and layer), summary (JSON: per layer and outcome mean/std/n)
"""

import logging

import pandas as pd
import torch

from mtp_core.config.settings import model_spec
from mtp_core.data.prompts import first_per_category
from mtp_core.decoding import build_decoder
from mtp_core.io import atomic_path, atomic_write_json, log_to_file, read_jsonl
from mtp_core.models.load import load_model
from mtp_core.papers.p3.alignment import COLUMNS, alignment_rows, summarize
from mtp_core.papers.p3.probing import ProbingDecoder

smk = snakemake
log_to_file(smk.log[0])
log = logging.getLogger("p3_alignment")
spec = dict(smk.params.spec)
per_cat = spec.get("per_category") if spec.get("per_category") is not None else smk.params.per_category
max_new = int(spec.get("max_new_tokens") or smk.params.max_new_tokens)
torch.set_num_threads(smk.threads)

loaded = load_model(
    model_spec(smk.config, smk.wildcards.model),
    base_dir=smk.input.get("model") or None,
    device="cuda" if torch.cuda.is_available() else "cpu",
)
rows = first_per_category(list(read_jsonl(smk.input.prompts)), per_cat)
prompts = [loaded.encode(r["prompt"]) for r in rows]
greedy = build_decoder("greedy", loaded.model, loaded.tokenizer)
conts = [g.tokens for g in greedy.generate_all(prompts, max_new, loaded.stop_criteria())]
probe = ProbingDecoder(loaded.model, loaded.tokenizer, **(spec.get("probing") or {}))
records, consistency = [], []
for r, p, c in zip(rows, prompts, conts):
    recs, cons = alignment_rows(
        loaded.model, probe, p, c, topk=int(spec["topk"]), prompt_id=str(r["id"]), category=r.get("category") or "all"
    )
    records += recs
    consistency.append(cons)
frame = pd.DataFrame(records, columns=COLUMNS)
with atomic_path(smk.output.csv) as tmp:
    frame.to_csv(tmp, index=False)
summary = summarize(frame)
summary |= {
    "model": smk.wildcards.model,
    "prompts": len(rows),
    "max_new_tokens": max_new,
    "probing": probe.describe()["params"],
    "topk": int(spec["topk"]),
    "sequence_argmax_reproduces_greedy": min(consistency) if consistency else None,
}
atomic_write_json(smk.output.summary, summary)
log.info("%d masks over %d prompts, accepted %.3f", summary["masks"], len(rows), summary["accepted_rate"] or 0)
