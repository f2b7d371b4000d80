"""Paper 2: the frozen trunk's features on the training windows (`mtp_core.papers.p2.data.write_features`).

snakemake.input:   model (prepared checkpoint dir, absent for hub/local models), shards (index.json)
snakemake.params:  spec (feature key entry: model, dataset, seq_len, val_tokens, window_seed, trunk_layers, rows),
                   model (its name)
snakemake.output:  the feature directory
"""

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.data.shards import TokenShards
from mtp_core.io import log_to_file
from mtp_core.papers.p2.data import Windows, write_features

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
loaded = load_rule_model(smk.config, smk.params.model, smk.input.get("model") or None)
windows = Windows(TokenShards(smk.input.shards), spec["seq_len"], spec["val_tokens"], spec["window_seed"])
layer = loaded.model.config.num_hidden_layers - spec["trunk_layers"]
write_features(loaded.model, windows, spec["rows"], layer, smk.output[0], describe=spec)
