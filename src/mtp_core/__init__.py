"""mtp_core: the library behind mtp-repro (data, models, masks, losses, decoders, evaluation, reports)."""

__version__ = "0.1.0"
