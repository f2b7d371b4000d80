"""Stand-ins for the Hugging Face hub (config section `hub_mirror`): the rehearsal of the paper scale
(`config/rehearsal.yaml`) runs the paper config's DAG with tiny stand-ins of its hub models, published heads,
datasets and downloaded files, written by rules into `results/hub/` and read by the same loaders.

`plan` (what the config mirrors, where, and the config rewrite), `models`, `heads`, `datasets` (with the rows of
`train_rows`, `eval_rows`, `bbh_rows`), `files`: the writers of each kind."""
