"""Data preparation: synthetic MetaMathQA-style math, MetaMathQA / GSM8K, the seed-grouped split,
pretraining token shards, and the prompt sets of the decoding benchmarks.

Modules (one job each): `arith` (exact step arithmetic), `templates` (word-problem templates), `synthetic`
(generator with the four MetaMathQA augmentation types), `metamathqa` (paper-scale loaders), `split`
(seed-grouped split + report), `math_data` (writes a math dataset), `records` (file / hub readers with
file-and-row errors), `sharegpt` (packaged ShareGPT), `pretrain` + `shards` (token shards and their reader),
`prompts` + `specbench` + `prompt_sets` (prompt sets), `hub/` (stand-ins of hub datasets and files).
"""

from .math_data import build_math, prepare_math
from .metamathqa import gsm8k_answer, load_gsm8k_test, load_metamathqa
from .pretrain import prepare_shards, pretrain_documents
from .prompt_sets import build_prompt_set, prepare_prompt_set
from .records import read_records
from .shards import TokenShards, token_dtype, write_shards
from .sharegpt import read_sharegpt
from .split import split_by_group, split_report
from .synthetic import generate_test, generate_train, synthetic_documents

__all__ = [
    "TokenShards",
    "build_math",
    "build_prompt_set",
    "generate_test",
    "generate_train",
    "gsm8k_answer",
    "load_gsm8k_test",
    "load_metamathqa",
    "prepare_math",
    "prepare_prompt_set",
    "prepare_shards",
    "pretrain_documents",
    "read_records",
    "read_sharegpt",
    "split_by_group",
    "split_report",
    "synthetic_documents",
    "token_dtype",
    "write_shards",
]
