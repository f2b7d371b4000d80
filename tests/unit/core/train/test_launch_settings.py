"""The training launcher's settings (`python -m mtp_core.cli train`): checked before anything is submitted (bad
keys, values and world sizes, unknown methods, `--set` overrides on the command line), the sbatch script a Slurm
launch produces, and paper 1's method through the launcher with its settings from the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtp_core.cli import main as cli_main
from mtp_core.train.launch import LauncherConfig, launch
from tests.toy_method import TOY, toy

pytestmark = pytest.mark.timeout(180)


def test_settings_are_checked_before_anything_is_submitted(tmp_path, capsys):
    out = tmp_path / "run" / "train.json"
    with pytest.raises(ValueError, match="launcher.cluster: 'auto' is not one of slurm, local, debug"):
        LauncherConfig.from_dict({"cluster": "auto"})
    with pytest.raises(ValueError, match="unknown key"):
        LauncherConfig.from_dict({"gpus": 1})
    with pytest.raises(ValueError, match="debug cluster runs one process"):
        LauncherConfig.from_dict({"cluster": "debug", "tasks_per_node": 2})
    with pytest.raises(ValueError, match="not divisible by world_size 3"):
        launch(out, TOY, toy(), {"cluster": "local", "tasks_per_node": 3})
    with pytest.raises(ValueError, match="toy settings: unknown setting"):
        launch(out, TOY, {**toy(), "lr": 1}, {"cluster": "local"})
    with pytest.raises(ValueError, match="unknown training method"):
        launch(out, "p9", toy(), {"cluster": "local"})
    assert not out.with_name("train.json.job.json").exists()
    assert (
        cli_main(["train", "--output", str(out), "--method", TOY, "--settings", json.dumps(toy()), "--set", "gpus=2"])
        == 2
    )
    assert "unknown key(s) gpus" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "train",
                "--output",
                str(out),
                "--method",
                TOY,
                "--settings",
                json.dumps(toy()),
                "--cluster",
                "slurm",
                "--partition",
                "gpu",
                "--set",
                'slurm_additional_parameters={"requeue": true}',
                "--dry-run",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["launcher"]["cluster"] == "slurm" and shown["launcher"]["partition"] == "gpu"
    assert shown["launcher"]["slurm_additional_parameters"] == {"requeue": True}


def test_slurm_executor_parameters(tmp_path, monkeypatch):
    """The sbatch script the launcher's settings produce (no Slurm needed to build it); partition and account
    fall back to the slurm/ profile's environment variables."""
    from submitit.slurm.slurm import SlurmExecutor

    from mtp_core.train.launch.records import Paths
    from mtp_core.train.launch.submit import _executor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # submitit wants `srun` on PATH
    monkeypatch.setenv("MTP_SLURM_PARTITION", "cpu-part")
    monkeypatch.setenv("MTP_SLURM_GPU_PARTITION", "gpu-part")
    monkeypatch.setenv("MTP_SLURM_ACCOUNT", "site-acct")
    for gpus, part in ((0, "cpu-part"), (1, "gpu-part")):
        cfg = LauncherConfig.from_dict({"cluster": "slurm", "gpus_per_node": gpus})
        text = _executor(cfg, Paths(tmp_path / "e.json", tmp_path), "x")._executor._make_submission_file_text("c", "u")
        assert f"#SBATCH --partition={part}" in text and "#SBATCH --account=site-acct" in text

    cfg = LauncherConfig.from_dict(
        {
            "cluster": "slurm",
            "nodes": 2,
            "tasks_per_node": 4,
            "gpus_per_node": 4,
            "cpus_per_task": 8,
            "mem_gb": 64,
            "timeout_min": 120,
            "partition": "gpu",
            "account": "proj",
            "slurm_additional_parameters": {"requeue": True},
        }
    )
    ex = _executor(cfg, Paths(tmp_path / "o.json", tmp_path), "train-p1-main")
    text = ex._executor._make_submission_file_text("python -u -m submitit.core._submit x", "uid")
    for line in (
        "--nodes=2",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
        "--cpus-per-task=8",
        "--mem=64GB",
        "--time=120",
        "--partition=gpu",
        "--account=proj",
        "--requeue",
        "--signal=USR2@90",
        "--job-name=train-p1-main",
    ):
        assert f"#SBATCH {line}" in text, line
    # a failing rank ends the step (srun), not a rendezvous wait; a site's own choice is kept, not doubled
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--kill-on-bad-exit=1" in srun.split(), srun
    cfg = LauncherConfig.from_dict({"cluster": "slurm", "slurm_srun_args": ["-K0", "--cpu-bind=none"]})
    text = _executor(cfg, Paths(tmp_path / "k.json", tmp_path), "x")._executor._make_submission_file_text("c", "u")
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "-K0" in srun.split() and "--kill-on-bad-exit=1" not in srun and "--cpu-bind=none" in srun, srun


def test_rendezvous_port_is_below_the_ephemeral_range_and_shared_by_ranks(tmp_path):
    """Every rank of a job derives the same MASTER_PORT from the job id, below the host's ephemeral range (where
    outgoing connections hold ports: EADDRINUSE); jobs differ; a host whose range starts low keeps submitit's."""
    from mtp_core.train.launch.job import rendezvous_port

    linux = tmp_path / "range"
    linux.write_text("32768\t60999\n")
    ports = {rendezvous_port(str(job), linux) for job in range(700, 760)}
    assert all(20000 <= p <= 32767 for p in ports) and len(ports) > 55
    assert rendezvous_port("721", linux) == rendezvous_port("721", linux)
    low = tmp_path / "low"
    low.write_text("15000 60999")
    assert all(20000 <= rendezvous_port(str(j), low) <= 60000 for j in range(50))
    assert 20000 <= rendezvous_port("721", tmp_path / "missing") <= 32767  # Linux's default range assumed


def test_p1_settings_from_config(tmp_path, capsys):
    """`--config FILE --run NAME --method p1`: the run's settings are `P1Plan.run_settings` (what the training rule passes),
    its launcher settings the top-level `launcher` < `papers.p1.launcher` < the run's `launcher`."""
    import yaml

    from mtp_core.papers.p1.plan import P1Plan
    from mtp_core.validation import load_config
    from tests.conftest import REPO

    raw = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    raw["launcher"] = {"cluster": "debug", "poll_s": 3, "threads": 2}
    raw["papers"]["p1"]["launcher"] = {"cluster": "local", "timeout_min": 30}
    raw["papers"]["p1"]["runs"]["main"] = {"launcher": {"tasks_per_node": 2}, "train": {"micro_batch_size": 2}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    settings, launcher = P1Plan.resolve_training(config, "main")
    assert settings == P1Plan(config).run_settings("main")
    assert settings["model"]["name"] == raw["papers"]["p1"]["model"] and settings["p1"]["k_max"] == 4
    assert launcher == {"cluster": "local", "timeout_min": 30, "tasks_per_node": 2, "poll_s": 3, "threads": 2}
    assert settings["train"]["threads"] == raw["threads"]  # the trainer uses the config's `threads`, as every job does
    with pytest.raises(ValueError, match=r"papers\.p1\.runs: no training 'other' \(trainings: bda, .*main"):
        P1Plan.resolve_training(config, "other")
    out = tmp_path / "run" / "launch.json"
    assert (
        cli_main(
            [
                "train",
                "--output",
                str(out),
                "--method",
                "p1",
                "--config",
                str(path),
                "--run",
                "main",
                "--nodes",
                "1",
                "--dry-run",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["settings"]["data"] == "results/data/math/train.jsonl"
    assert shown["launcher"]["tasks_per_node"] == 2 and shown["launcher"]["timeout_min"] == 30


def test_p1_method_through_the_launcher(tmp_path):
    """Paper 1 end to end through the launcher (debug cluster: in this process): the student is exported as an HF
    checkpoint with <MTP>, the output records it."""
    from transformers import AutoModelForCausalLM

    from mtp_core.models.load import prepare_base_model
    from tests.conftest import tiny_spec

    spec = tiny_spec("llama")
    base = prepare_base_model(spec, tmp_path / "base")
    rows = [
        {"query": f"What is {a} + {b}?", "response": f"{a} + {b} = {a + b}. The answer is {a + b}."}
        for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = {
        "model": spec,
        "base_dir": str(base),
        "data": str(data),
        "train": {
            "max_steps": 2,
            "global_batch_size": 2,
            "micro_batch_size": 1,
            "warmup_steps": 1,
            "lr": 1e-3,
            "checkpoint_every": 1,
            "progress": False,
        },
        "p1": {"seq_len": 32, "k_max": 4},
    }
    out = tmp_path / "p1" / "train.json"
    res = launch(out, "p1", settings, {"cluster": "debug", "threads": 1})
    assert res["steps"] == 2 and Path(res["final_dir"]).name == "model"
    model = AutoModelForCausalLM.from_pretrained(res["final_dir"])
    assert model.config.mtp_mask_token_id is not None
    with pytest.raises(ValueError, match="p1 settings.data: .* does not exist"):
        launch(out, "p1", {**settings, "data": str(tmp_path / "nope.jsonl")}, {"cluster": "debug"})
