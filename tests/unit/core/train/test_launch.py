"""The training launcher (`python -m mtp_core.cli train`) without Slurm: submitit's local executor (a subprocess
per task) and debug executor (in this process).

* submit -> result -> the output written only on success; a failing trainer -> a clear error (the job's traceback
  and the submitit log paths), no output, exit code 1 from the CLI;
* re-attach: a launcher killed while its job runs is replaced by a second one that waits for the same job, and a
  third one after completion reads the result; one submission in all;
* preemption (SIGTERM then USR2 to the job's task, as Slurm sends it; submitit 1.5.4's `LocalJob._interrupt()` would
  kill the local controller instead): the trainer saves at the next step boundary, the local controller restarts
  the task (requeue, same job id), it resumes from that step and ends with the same weights as an uninterrupted run;
* distributed: 2 local tasks through submitit's TorchDistributedEnvironment (gloo), DDP (with a preemption) and
  FSDP2, match one process at the same global batch;
* the loop hooks the trainer uses (`SAVE`, `StopTraining`). Settings, the sbatch script and the p1 method:
  `test_launch_settings.py`.

Most tests train `toy` (a small MLP on the generic loop): a job is one `import torch` plus milliseconds of training.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from mtp_core.cli import main as cli_main
from mtp_core.train import SAVE, StopTraining, read_curves, train
from mtp_core.train.launch import LaunchError, interrupt_job, launch
from mtp_core.train.loop import WALL_CLOCK_COLUMNS
from tests.toy_method import TOY, TRAIN, ToyData, toy

pytestmark = pytest.mark.timeout(180)

FAST = {"poll_s": 0.5, "progress_s": 5.0, "threads": 1}


def _job(out: Path) -> dict:
    return json.loads(out.with_name(out.name + ".job.json").read_text())


def _job_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in out.with_name(out.name + ".submitit").iterdir() if p.name[0].isdigit())


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "model" / "model.pt", weights_only=True)


def _curves(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_COLUMNS} for r in read_curves(run_dir / "curves.csv")]


def _attempts(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]


def _wait_for_step(run_dir: Path, step: int, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rows = read_curves(run_dir / "curves.csv")
        except (OSError, ValueError):
            rows = []
        if rows and int(rows[-1]["step"]) >= step:
            return int(rows[-1]["step"])
        time.sleep(0.05)
    raise AssertionError(f"no step {step} in {run_dir / 'curves.csv'} after {timeout} s")


# ------------------------------------------------------------------------------------------ loop hooks


class _Toy:
    metric_names = ["mse"]

    def __call__(self, model, batch, ctx):
        from mtp_core.train import StepOutput

        x, y = batch
        err = (model(x).squeeze(-1) - y) ** 2
        return StepOutput(loss=err.mean(), weight=float(len(y)), metrics={"mse": (err.sum().detach(), len(y))})


def _toy_model_and_data():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1), ToyData(24, 4, 0)


def test_loop_save_and_stop_hooks_resume_bit_exact(tmp_path):
    """A callback returning SAVE adds a resumable state; one raising StopTraining gets one at that step before the
    exception propagates; resuming from it equals the uninterrupted run bit for bit."""
    from mtp_core.train import TrainConfig

    cfg = TrainConfig(**{**TRAIN, "checkpoint_every": 0, "keep_last": 5})
    model, data = _toy_model_and_data()
    train(_Toy(), model, data, cfg, tmp_path / "ref", export_fn=lambda m, p: None)
    ref = {k: v.clone() for k, v in model.state_dict().items()}

    def hooks(done, row):
        if done == 3:
            return SAVE
        if done == 7:
            raise StopTraining("preempted")
        return None

    model, data = _toy_model_and_data()
    with pytest.raises(StopTraining):
        train(_Toy(), model, data, cfg, tmp_path / "run", callbacks=[hooks], export_fn=lambda m, p: None)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000003", "step-00000007"]
    model, data = _toy_model_and_data()
    res = train(_Toy(), model, data, cfg, tmp_path / "run", export_fn=lambda m, p: None)
    assert res.resumed_from == 7
    assert all(torch.equal(model.state_dict()[k], ref[k]) for k in ref)
    assert _curves(tmp_path / "run") == _curves(tmp_path / "ref")


# ------------------------------------------------------------------------------------ local and debug


def test_local_submit_result_and_output(tmp_path):
    out = tmp_path / "run" / "train.json"
    res = launch(out, TOY, toy(), {"cluster": "local", **FAST})
    assert out.exists() and json.loads(out.read_text()) == res
    assert res["steps"] == 12 and res["resumed_from"] == 0 and res["cluster"] == "local"
    assert res["final_dir"] == str(out.parent / "model") and (out.parent / "model" / "model.pt").exists()
    job = _job(out)
    assert job["cluster"] == "local" and job["folder"].endswith("train.json.submitit/%j")
    assert [s["job_id"] for s in job["submissions"]] == [res["job_id"]] == _job_dirs(out)
    cost = json.loads(out.with_name("train.json.cost.json").read_text())
    (entry,) = cost["jobs"]
    assert entry["job_id"] == res["job_id"] and entry["state"] == "COMPLETED" and entry["gpus"] == 0
    assert entry["elapsed_s"] > 0 and [a["status"] for a in entry["attempts"]] == ["completed"]
    assert cost["total"]["gpu_hours"] == 0.0


def test_failing_trainer_gives_traceback_and_log_path_and_no_output(tmp_path, capsys):
    """Through the CLI: exit code 1, stderr (the rule's log) has the job's traceback and the submitit log paths; the
    declared output is not written; the next run submits a new job (a failed job is never re-attached)."""
    out = tmp_path / "run" / "train.json"
    argv = [
        "--output",
        str(out),
        "--method",
        TOY,
        "--settings",
        json.dumps(toy(fail_at_step=3)),
        "--cluster",
        "local",
        "--launcher",
        json.dumps(FAST),
    ]
    assert cli_main(["train", *argv]) == 1
    err = capsys.readouterr().err
    job_id = _job(out)["job_id"]
    log_err = out.parent / "train.json.submitit" / job_id / f"{job_id}_0_log.err"
    assert "RuntimeError: toy: failing on purpose at step 3" in err and "Traceback" in err
    assert str(log_err) in err and log_err.exists() and f"training job {job_id} (local) failed" in err
    assert not out.exists()
    cost = json.loads(out.with_name("train.json.cost.json").read_text())
    assert cost["jobs"][0]["attempts"][0]["status"].startswith("failed: RuntimeError")
    assert cli_main(["train", *argv]) == 1
    assert "new submission" in capsys.readouterr().err and len(_job(out)["submissions"]) == 2


def test_a_failed_rank_stops_its_peers_at_once(tmp_path):
    """Rank 1 of 2 local tasks fails at step 3 while rank 0 waits for it in the step's all-reduce: the launcher
    raises rank 1's own error (not rank 0's "connection closed by peer", which gloo gives once rank 1's process is
    gone, and which task 0's result would report first), and rank 0 is stopped rather than left waiting (NCCL
    would wait until the process group's timeout)."""
    out = tmp_path / "run" / "train.json"
    launcher = {"cluster": "local", "tasks_per_node": 2, "strategy": "ddp", **FAST}
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"failing on purpose at step 3 \(rank 1\)"):
        launch(out, TOY, toy(fail_at_step=3, fail_on_rank=1), launcher)
    assert time.monotonic() - t0 < 120 and not out.exists()
    job_id = _job(out)["job_id"]
    deadline = time.monotonic() + 30
    while _alive(int(job_id)) and time.monotonic() < deadline:  # the controller kills its tasks, then exits
        time.sleep(0.2)
    assert not _alive(int(job_id))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_debug_cluster_runs_in_process(tmp_path, capsys):
    out = tmp_path / "run" / "train.json"
    res = launch(out, TOY, toy(), {"cluster": "debug"})
    assert res["steps"] == 12 and res["job_id"].startswith("DEBUG_") and out.exists()
    bad = tmp_path / "bad" / "train.json"
    with pytest.raises(LaunchError, match="failing on purpose at step 2") as e:
        launch(bad, TOY, toy(fail_at_step=2), {"cluster": "debug"})
    assert "submitit logs" in str(e.value) and not bad.exists()
    assert "pdb skipped" in capsys.readouterr().err


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_debug_cluster_group_of_one(tmp_path, strategy):
    """strategy ddp/fsdp with one process still builds a (gloo) group of one through TorchDistributedEnvironment:
    the DDP/FSDP2 code paths run in the launcher's own process and give the single-process weights."""
    plain = launch(tmp_path / "plain" / "train.json", TOY, toy(), {"cluster": "debug", "threads": 1})
    res = launch(tmp_path / "one" / "train.json", TOY, toy(), {"cluster": "debug", "threads": 1, "strategy": strategy})
    assert res["attempts"][0]["strategy"] == strategy and res["attempts"][0]["backend"] == "gloo"
    assert "attempts" not in res["result"] and "attempts" not in res["cost"]  # the record lists them once
    assert not torch.distributed.is_initialized() and "MASTER_PORT" not in os.environ
    w1, w2 = _weights(tmp_path / "plain"), _weights(tmp_path / "one")
    assert all(torch.allclose(w1[k], w2[k], rtol=0, atol=1e-6) for k in w1) and plain["steps"] == res["steps"]


def _launch_in_child(out, settings, launcher):
    launch(out, TOY, settings, launcher)


def test_reattach_after_the_launcher_is_killed_submits_once(tmp_path, capsys):
    """Launcher 1 submits and is SIGKILLed while its job trains (as when Snakemake dies); launcher 2 finds the job
    running and waits for it; launcher 3, after completion, reads its result. One submission in all."""
    out = tmp_path / "run" / "train.json"
    settings = toy(step_sleep_s=0.1, train={"max_steps": 30})
    launcher = {"cluster": "local", **FAST}
    first = mp.get_context("fork").Process(target=_launch_in_child, args=(out, settings, launcher))
    first.start()
    _wait_for_step(out.parent, 2)
    os.kill(first.pid, signal.SIGKILL)
    first.join()
    job_id = _job(out)["job_id"]
    assert not out.exists()
    res = launch(out, TOY, settings, launcher)  # launcher 2
    assert "re-attaching to job" in capsys.readouterr().err
    assert res["job_id"] == job_id and res["steps"] == 30 and out.exists()
    again = launch(out, TOY, settings, launcher)  # launcher 3: the job is over, its result is read
    assert "its result is there" in capsys.readouterr().err and again["job_id"] == job_id
    assert [s["job_id"] for s in _job(out)["submissions"]] == [job_id] and _job_dirs(out) == [job_id]
    assert [a["status"] for a in _attempts(out.parent)] == ["completed"]
    # other settings never re-attach to a job (here: a finished one, so a new job is submitted)
    other = launch(out, TOY, toy(step_sleep_s=0.1, train={"max_steps": 31}), launcher)
    assert other["job_id"] != job_id and len(_job(out)["submissions"]) == 2


def test_finished_job_whose_model_is_gone_is_not_reattached(tmp_path, capsys):
    """Snakemake deletes a failed rule's declared outputs (the model too): the finished job is then not re-attached
    (its result names a model that no longer exists); a new job resumes from the last checkpoint and re-exports."""
    out = tmp_path / "run" / "train.json"
    settings, launcher = toy(), {"cluster": "local", **FAST}
    first = launch(out, TOY, settings, launcher)
    weights = _weights(out.parent)
    shutil.rmtree(out.parent / "model")
    out.unlink()
    second = launch(out, TOY, settings, launcher)
    assert "is gone: new submission" in capsys.readouterr().err
    assert second["job_id"] != first["job_id"] and second["resumed_from"] == 12 and second["steps"] == 12
    assert all(torch.equal(weights[k], v) for k, v in _weights(out.parent).items())


def test_changed_recipe_never_resumes_the_old_state(tmp_path, capsys):
    """The run dir is stamped with the settings that shape the steps: knobs such as logging leave the stamp alone
    (resume), a longer constant-schedule run continues the shorter one, and a changed recipe starts from step 0
    with the old state moved to superseded/ (kept), ending with the weights of a fresh training."""
    out, launcher = tmp_path / "run" / "train.json", {"cluster": "debug", "threads": 1}
    launch(out, TOY, toy(), launcher)
    assert launch(out, TOY, toy(train={"log_every": 3, "checkpoint_every": 4}), launcher)["resumed_from"] == 12
    longer = launch(out, TOY, toy(train={"max_steps": 14}), launcher)
    assert (longer["resumed_from"], longer["steps"]) == (12, 14)
    assert "training starts from step 0" not in capsys.readouterr().err
    fresh = launch(out, TOY, toy(train={"max_steps": 14, "lr": 0.01}), launcher)
    assert fresh["resumed_from"] == 0 and "training starts from step 0" in capsys.readouterr().err
    [old] = list((out.parent / "superseded").iterdir())
    assert (old / "checkpoints").is_dir() and (old / "curves.csv").is_file() and not (old / "train.json").exists()
    ref = tmp_path / "ref" / "train.json"
    launch(ref, TOY, toy(train={"max_steps": 14, "lr": 0.01}), launcher)
    w1, w2 = _weights(out.parent), _weights(ref.parent)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)


def _launch_in_thread(out, settings, launcher, box):
    try:
        box["result"] = launch(out, TOY, settings, launcher)
    except BaseException as e:
        box["error"] = e


def _wait_for_text(path_of, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = path_of()
        if path is not None and path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} in {path_of()} after {timeout} s")


def test_preemption_requeues_resumes_and_matches_uninterrupted(tmp_path, capsys):
    """Two preemptions (SIGTERM + USR2 to the task, as Slurm sends them) of one local job:
    1. during the (simulated) model load, before any step: submitit requeues at once (exit 144; nothing to save);
    2. mid-training: the trainer saves at the next step boundary, exits for requeue, the local controller restarts
       the task under the same job id, it resumes there.
    No finished step is lost; the final weights and curve equal an uninterrupted run's; one submission."""
    settings = toy(step_sleep_s=0.1, startup_sleep_s=2.0, train={"max_steps": 40, "checkpoint_every": 10})
    out = tmp_path / "pre" / "train.json"
    box: dict = {}
    t = threading.Thread(target=_launch_in_thread, args=(out, settings, {"cluster": "local", **FAST}, box))
    t.start()

    def log_out():
        try:
            job_id = _job(out)["job_id"]
        except (OSError, ValueError):
            return None
        return out.parent / "train.json.submitit" / job_id / f"{job_id}_0_log.out"

    _wait_for_text(log_out, "toy: loading")
    job_id = interrupt_job(out)
    at = _wait_for_step(out.parent, 6)
    assert interrupt_job(out) == job_id
    t.join(120)
    assert "error" not in box, box.get("error")
    res = box["result"]
    ref = launch(
        tmp_path / "ref" / "train.json",
        TOY,
        {**settings, "step_sleep_s": 0.0, "startup_sleep_s": 0.0},
        {"cluster": "debug", "threads": 1},
    )  # the sleeps change no arithmetic

    a = _attempts(out.parent)
    assert [x["status"] for x in a] == ["requeued before the first step (exit 144)", "preempted", "completed"]
    assert {x["job_id"] for x in a} == {job_id}
    stopped, resumed = a[1]["end_step"], a[2]["start_step"]
    print(
        f"preempted at step >= {at}: stopped at step {stopped}, resumed from {resumed}; "
        f"steps lost {stopped - resumed} (interval 10); attempt 3 restarted "
        f"{a[2]['started_at'] - a[1]['ended_at']:.1f} s after attempt 2 stopped"
    )
    assert at <= stopped < 40 and resumed == stopped  # no finished step lost (bound: one interval of 10)
    assert res["steps"] == 40 and res["resumed_from"] == stopped
    assert [x["status"] for x in res["attempts"]] == ["preempted before the loop", "preempted", "completed"]
    assert _job_dirs(out) == [job_id] and len(_job(out)["submissions"]) == 1
    log = log_out().read_text()
    assert log.count("Requeued job") == 2 and "Calling checkpoint method" in log
    w, w_ref = _weights(out.parent), _weights(tmp_path / "ref")
    assert all(torch.equal(w[k], w_ref[k]) for k in w_ref)
    assert _curves(out.parent) == _curves(tmp_path / "ref")
    cost = json.loads(out.with_name("train.json.cost.json").read_text())
    assert cost["jobs"][0]["requeues"] == 2 and ref["steps"] == 40


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_local_tasks_match_one_process(tmp_path, strategy):
    """2 tasks of one local job (submitit's TorchDistributedEnvironment -> gloo process group) at global batch 8
    (2 micro-batches of 2 per task) give the curve and weights of 1 process with 4 micro-batches. The DDP run is
    preempted half-way: the stop is agreed by all-reduce, both ranks leave, both restart and resume."""
    settings = toy(step_sleep_s=0.05 if strategy == "ddp" else 0.0, train={"max_steps": 30, "checkpoint_every": 10})
    launch(tmp_path / "one" / "train.json", TOY, {**settings, "step_sleep_s": 0.0}, {"cluster": "debug", "threads": 1})
    out = tmp_path / "two" / "train.json"
    launcher = {"cluster": "local", "tasks_per_node": 2, "strategy": strategy, **FAST}
    if strategy == "ddp":
        box: dict = {}
        t = threading.Thread(target=_launch_in_thread, args=(out, settings, launcher, box))
        t.start()
        _wait_for_step(out.parent, 5)
        interrupt_job(out)
        t.join(150)
        assert "error" not in box, box.get("error")
        assert [x["status"] for x in _attempts(out.parent)] == ["preempted", "completed"]
    else:
        launch(out, TOY, settings, launcher)
    a = _attempts(out.parent)
    assert all(x["world_size"] == 2 and x["strategy"] == strategy and x["backend"] == "gloo" for x in a)
    one, two = _curves(tmp_path / "one"), _curves(tmp_path / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two] and [r["tokens"] for r in one] == [
        r["tokens"] for r in two
    ]
    d_curve = max(abs(float(x["loss"]) - float(y["loss"])) for x, y in zip(one, two))
    w1, w2 = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    d_w = max((w1[k] - w2[k]).abs().max().item() for k in w1)
    print(f"{strategy}: 2 local tasks vs 1 process: max |loss diff| {d_curve:.3g}, max |weight diff| {d_w:.3g}")
    assert d_curve < 1e-5 and d_w < 1e-5
