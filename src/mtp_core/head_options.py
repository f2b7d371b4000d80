"""The options of the core's DeepSeek-style MTP heads (`heads.deepseek`), importing no torch: the config checks
(paper 2's `P2Config`) read them before any job."""

CONCAT = ("emb_first", "hidden_first")  # the order of [embedding; hidden] a head's projection reads
INITS = ("copy_last", "normal")  # `DeepSeekMTPHeads.from_trunk`: a copy of the trunk's last layer, or N(0, σ)
