"""The decoders whose layers `layers` runs by hand, importing no torch: the config checks (paper 4's layer subsets)
read them before any job."""

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")  # model types; full attention in every layer is checked on the model
