"""The bench: `protocol` (decoders side by side on the same prompts) and `prompt_sets` (a prompt set x decoders -> a result file each)."""
