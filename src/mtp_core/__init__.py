"""mtp_core: the library behind mtp-repro (config, data, models, decoders, training, evaluation, results)."""
