"""Stand-ins for the Hugging Face hub's datasets and downloaded files (config section `hub_mirror`, written by the
rehearsal's rules into `results/hub/`; what a config mirrors, where, and its rewrite: `config.hub_mirror`):
`datasets` (with the rows of `train_rows`, `eval_rows`, `bbh_rows`) and `files`. The stand-ins of models and
published heads: `models.hub`."""
