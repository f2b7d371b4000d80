"""The bench: `protocol` (decoders side by side on the same prompts), `prompt_sets` (a prompt set x decoders -> a
result file each), `device_costs` (GPU-priced forwards) and `leaderboard/` (every method side by side: its plan,
its rows' job, its table and figure)."""
