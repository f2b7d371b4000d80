"""Paper 1: train one run (`papers.p1.runs.<run>`) with the shared loop, locally; resumes after a kill.

snakemake.input.model      the prepared base checkpoint (gguf/tiny models; absent for hub/local models)
snakemake.input.data       the train rows (`query`, `response`)
snakemake.params.settings  `mtp_core.p1_plan.run_settings`: model spec, base_dir, data, train (TrainConfig keys),
                           p1 (P1Config keys), mask_seed, on_bad_row — the settings `mtp_core.train.launch`
                           takes for method p1, so the submitit launcher can replace the call below unchanged
snakemake.params.run_dir   results/models/p1/<run>: checkpoints/, exports/step-N/, curves.csv, model/,
                           train_summary.json (the loop's layout)
snakemake.output           summary (train_summary.json), model (final HF export)
"""

import torch

from mtp_core.io import log_to_file
from mtp_core.models import load_model
from mtp_core.train.p1 import read_rows, train_p1

smk = snakemake  # noqa: F821  (injected by Snakemake)
log_to_file(smk.log[0])
torch.set_num_threads(smk.threads)
s = dict(smk.params.settings)
rows = read_rows(smk.input.data, s.get("on_bad_row", "error"))  # bad rows fail here, before the model loads
loaded = load_model(s["model"], base_dir=smk.input.get("model") or None)
train_p1(loaded, rows, s["p1"], s["train"], smk.params.run_dir, mask_seed=int(s.get("mask_seed", 0)),
         device="cuda" if torch.cuda.is_available() else "cpu")
