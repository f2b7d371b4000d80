"""Models: `load` (one loader for every kind of model), `plan` (where each declared model's weights live and what a
rule loading it reads), `heads/` (draft heads) and `hub/` (stand-ins of hub models and published heads)."""
