"""Evaluate one (model, decoder, task) with lm-eval through the `mtp` model class; write one result file.

The result JSON (`results.write.make_result`, kind "eval") holds every metric lm-eval reports for the task as
`{"<metric>,<filter>": {"value", "stderr"}}` (stderr None where lm-eval gives "N/A"), the decode statistics
of all requests (effective k trimmed to the stop-truncated answer), and the settings as run; the
`.samples.jsonl` beside it holds one record per document, its filters and metrics joined by doc id.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lm_eval import simple_evaluate

from ..config.settings import config_hash, hub_task_datasets
from ..decoding import Decoder
from ..models.load import LoadedModel
from ..results.write import decode_stats, effective_k, make_result, sample_record, write_result
from .hub_data import hub_datasets_from
from .lm import MTPLM, RequestStats
from .settings import EvalSettings
from .tasks import task_manager_for

log = logging.getLogger(__name__)


def run_evaluation(
    config: dict,
    loaded: LoadedModel,
    decoder: str | Decoder,
    task: str,
    output: str | os.PathLike,
    *,
    decoder_params: dict[str, Any] | None = None,
    data_path: str | os.PathLike | None = None,
    settings: EvalSettings | None = None,
    paper: str = "base",
    run: str | None = None,
    model: str | None = None,
) -> dict:
    """Run lm-eval task `task` with `decoder` on `loaded`; write and return the result.

    `data_path` is the test split of a local task (see `tasks.task_dataset`); built-in tasks need none.
    `paper`/`run`/`model` label the result: `run` defaults to the loaded model's name (a trained student's
    run name at paper level), `model` to the same (the declared base model).
    """
    settings = settings or EvalSettings.from_config(config)
    chat = loaded.chat_template if settings.apply_chat_template is None else settings.apply_chat_template
    if chat and getattr(loaded.tokenizer, "chat_template", None) is None:
        raise ValueError(f"evaluation.apply_chat_template: model {loaded.name!r} has no chat template")
    lm = MTPLM(
        loaded,
        decoder,
        decoder_params,
        batch_size=settings.batch_size,
        chat_template_kwargs=settings.chat_template_kwargs,
    )
    gen_kwargs: dict[str, Any] = {}
    if settings.max_gen_toks is not None:
        gen_kwargs["max_gen_toks"] = settings.max_gen_toks
    if settings.until is not None:
        gen_kwargs["until"] = list(settings.until)  # lm-eval replaces the task's list with this one
    log.info("evaluating %s on %s with %s (chat template %s)", loaded.name, task, lm.decoder.describe(), chat)

    t0 = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="mtp-tasks-") as tmp,
        lean_env_info(),
        hub_datasets_from(hub_task_datasets(config, task)),  # the rehearsal: hub stand-ins (none: a no-op)
    ):
        res = simple_evaluate(
            model=lm,
            tasks=[task],
            task_manager=task_manager_for(task, data_path, tmp),
            limit=settings.limit,
            num_fewshot=settings.num_fewshot,
            bootstrap_iters=settings.bootstrap_iters,
            apply_chat_template=chat,
            fewshot_as_multiturn=chat,
            gen_kwargs=gen_kwargs or None,
            log_samples=True,
        )
    wall = time.perf_counter() - t0

    records = join_samples(res["samples"], lm.request_stats)
    metrics = lm_eval_metrics(res["results"].get(task, {}))
    if not metrics:
        log.warning("lm-eval reported no metric for %s", task)
    stats = list(lm.request_stats.values())
    task_cfg = res["configs"].get(task) or next(iter(res["configs"].values()))
    gen_cfg = task_cfg.get("generation_kwargs") or {}
    result = make_result(
        kind="eval",
        paper=paper,
        run=run or loaded.name,
        model=model or loaded.name,
        task=task,
        decoder=lm.decoder.describe(),
        n=len(records),
        metrics=metrics,
        decode_stats=decode_stats([s.gen for s in stats], [s.answer_tokens for s in stats]),
        settings={
            "limit": settings.limit,
            "batch_size": settings.batch_size,
            "max_gen_toks": gen_cfg.get("max_gen_toks", lm.max_gen_toks),
            "until": gen_cfg.get("until"),
            "apply_chat_template": chat,
            "chat_template_kwargs": settings.chat_template_kwargs,
            "fewshot_as_multiturn": chat,
            "num_fewshot": task_cfg.get("num_fewshot"),
            "bootstrap_iters": settings.bootstrap_iters,
            "data": str(Path(data_path).resolve()) if data_path is not None else None,
            "n_docs": sum(v["original"] for v in res["n-samples"].values()),
            "task_version": res.get("versions", {}).get(task),
            "device": str(lm.device),
            "eval_wall_s": wall,
        },
        scale=config["scale"],
        config_hash=config_hash(config),
    )
    write_result(str(output), result, records)
    log.info("%s: n=%d %s -> %s", task, len(records), {k: v["value"] for k, v in metrics.items()}, output)
    return result


@contextmanager
def lean_env_info() -> Iterator[None]:
    """Skip lm-eval's environment probe while evaluating: `simple_evaluate` calls `add_env_info`, which runs
    torch's `collect_env` (`pip list`, compiler and driver queries: several subprocesses, ~1.5 s of CPU) on every
    call, i.e. once per decoder setting of a sweep. Our results record the versions themselves
    (`results.write.versions`); the probe's text is replaced by a note."""
    import lm_eval.evaluator as evaluator

    def lean(storage: dict) -> None:
        storage["pretty_env_info"] = "skipped by mtp_core.evaluate.run (see the result's `versions`)"

    original = evaluator.add_env_info
    evaluator.add_env_info = lean
    try:
        yield
    finally:
        evaluator.add_env_info = original


def lm_eval_metrics(task_results: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """`{"<metric>,<filter>": {"value", "stderr"}}` from one entry of lm-eval's `results`."""
    out: dict[str, dict[str, float | None]] = {}
    for key, value in task_results.items():
        if "," not in key:
            continue
        metric, flt = key.split(",", 1)
        if metric.endswith("_stderr") or not isinstance(value, (int, float)):
            continue
        se = task_results.get(f"{metric}_stderr,{flt}")
        out[key] = {"value": float(value), "stderr": float(se) if isinstance(se, (int, float)) else None}
    return out


def join_samples(samples: Mapping[str, list[dict]], stats: Mapping[tuple, RequestStats]) -> list[dict]:
    """One record per (task, document) from lm-eval's logged samples (one entry per document and filter),
    joined with the decode statistics of the document's first request by (task, doc_id)."""
    records: dict[tuple[str, int], dict] = {}
    for task, entries in samples.items():
        for e in entries:
            key = (task, e["doc_id"])
            if key not in records:
                st = stats.get((task, e["doc_id"], 0, 0))
                if st is None:
                    raise KeyError(f"no decode statistics for task {task!r} doc {e['doc_id']}")
                fields_ = dict(
                    task=task,
                    doc_id=e["doc_id"],
                    prompt=e["arguments"][0][0],
                    target=e["target"],
                    response=e["resps"][0][0],
                    filtered={},
                    metrics={},
                    answer_tokens=st.answer_tokens,
                    effective_k=effective_k(st.gen.accepted, st.answer_tokens),
                )
                records[key] = sample_record(st.gen, **fields_)
            rec = records[key]
            rec["filtered"][e["filter"]] = e["filtered_resps"][0]
            rec["metrics"].update({f"{m},{e['filter']}": e[m] for m in e["metrics"]})
    return [records[k] for k in sorted(records)]
