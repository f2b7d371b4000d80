"""Paper 1's "Baseline Step 0, k=1": the base model with greedy decoding on one task.

snakemake.input.foundation  optional: the foundation's result of the same evaluation (same model, task, greedy,
                            settings), relabelled (paper p1, run `<model>@step0`) instead of decoded again
snakemake.input.model/data  otherwise: the prepared base checkpoint (gguf/tiny) and the local task's test split
snakemake.params            model, task, run (`<model>@step0`), settings (EvalSettings overrides)
snakemake.output.result     results/decode/p1/<model>@step0/<task>/greedy.json (+ .samples.jsonl)
"""

import json
import shutil
from pathlib import Path

from mtp_core.io import atomic_write_json, log_to_file


def samples_path(result: str) -> str:  # as mtp_core.results.write.samples_path, without importing torch for a copy
    return result[: -len(".json")] + ".samples.jsonl"


smk = snakemake
log_to_file(smk.log[0])
source = smk.input.get("foundation") or None
if source:
    result = json.loads(Path(source).read_text(encoding="utf-8"))
    result.update(paper="p1", run=smk.params.run, reused_from=str(source))
    shutil.copyfile(samples_path(str(source)), samples_path(str(smk.output.result)))
    atomic_write_json(smk.output.result, result)
else:
    import torch

    from mtp_core.config.settings import model_spec
    from mtp_core.evaluate import EvalSettings, check_task_data, run_evaluation
    from mtp_core.models.load import load_model

    torch.set_num_threads(smk.threads)
    task, data = smk.params.task, smk.input.get("data") or None
    if data is not None:  # a task on local data
        check_task_data(task, data)
    loaded = load_model(
        model_spec(smk.config, smk.params.model),
        base_dir=smk.input.get("model") or None,
        device="cuda" if torch.cuda.is_available() else "cpu",
        dtype=smk.params.dtype,
    )
    run_evaluation(
        smk.config,
        loaded,
        "greedy",
        task,
        smk.output.result,
        data_path=data,
        settings=EvalSettings.from_config(smk.config, **dict(smk.params.settings)),
        paper="p1",
        run=smk.params.run,
        model=smk.params.model,
    )
