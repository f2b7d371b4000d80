"""Evaluation: the lm-eval model class `mtp` over any `Decoder`, local task YAMLs, and the runner that
writes one result file per (model, decoder, task).

Names are imported lazily, so that the light `tasks` module (used while Snakemake parses the workflow) does
not pull in lm-eval; importing `mtp_core.evaluate.lm` (or using `MTPLM` / `run_evaluation`) registers `mtp`.
"""

from ..io import lazy_exports

_EXPORTS = {
    "MTPLM": "lm",
    "RequestStats": "lm",
    "load_from_args": "lm",
    "EvalSettings": "settings",
    "join_samples": "run",
    "lm_eval_metrics": "run",
    "run_evaluation": "run",
    "LOCAL_TASKS": "tasks",
    "check_task_data": "tasks",
    "is_local_task": "tasks",
    "task_dataset": "tasks",
    "task_manager_for": "tasks",
    "write_task_yaml": "tasks",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
