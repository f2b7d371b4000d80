"""Stand-ins for the Hugging Face hub's models and published heads (config section `hub_mirror`, written by the
rehearsal's rules into `results/hub/`, read by the same loaders; what a config mirrors: `config.hub_mirror`):
`checkpoints` (tiny random checkpoints of a model family's class and config features) and `heads` (random heads
in the published layouts). The stand-ins of datasets and files: `data.hub`."""
