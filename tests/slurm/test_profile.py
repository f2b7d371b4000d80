"""The `slurm/` profile without a cluster: dry-runs choose the scale from the profile's configfile (or the
command line's), and the YTE template takes partition, account and GPU flags from the environment. Not marked
`slurm`: no cluster needed, so they run in every `make test`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import yte

from ..conftest import REPO

PROFILE = REPO / "slurm/config.v8+.yaml"
SITE_VARS = (
    "MTP_SLURM_PARTITION",
    "MTP_SLURM_ACCOUNT",
    "MTP_SLURM_GPU_PARTITION",
    "MTP_SLURM_GRES",
    "MTP_SLURM_GPU_MODEL",
)

GPU_RULES = (
    "decode_prompts",
    "evaluate",
    "p1_evaluate",
    "p1_evaluate_checkpoint",
    "p1_baseline",
    "p1_confidence",
    "p3_decode",
    "p3_alignment",
    "p4_evaluate",
    "p4_vanilla",
    "p4_speed",
    "p2_features",
    "p2_reference",
    "p2_acceptance",
    "p2_speed_fig4",
    "p2_speed_fig5",
    "p2_speed_table8",
    "p5_selfdistill",
    "p5_frontier",
    "p5_decode",
    "p5_import_heads",
)


def site_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SITE_VARS and k != "SNAKEMAKE_PROFILE"}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **values}


def render(**values: str) -> dict:
    saved = {k: os.environ.pop(k) for k in SITE_VARS if k in os.environ}
    os.environ.update(values)
    try:
        with PROFILE.open() as f:
            return yte.process_yaml(f, require_use_yte=True)
    finally:
        for k in values:
            os.environ.pop(k, None)
        os.environ.update(saved)


def dry_run(tmp_path, env, *args: str, targets: tuple[str, ...] = ("all",)) -> str:
    """`snakemake --profile slurm -n <targets>` (default `all`) from the repository root, as a user types it."""
    cmd = [sys.executable, "-m", "snakemake", "--profile", "slurm", "--directory", str(tmp_path), "-n", *args]
    cmd += ["--", *targets]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out


def resources_of(out: str, rule: str) -> list[str]:
    return re.findall(rf"rule {rule}:\n(?:    .*\n)*?    resources: (.*)", out)


def test_one_profile_file():
    # Snakemake 9 uses the highest (profile|config).vN+.yaml <= 9: a second file would silently win or lose
    assert sorted(p.name for p in (REPO / "slurm").glob("*.yaml")) == ["config.v8+.yaml"]


def test_site_settings_from_environment():
    bare = render()
    assert bare["executor"] == "slurm" and bare["configfile"] == "config/paper.yaml"
    assert bare["rerun-incomplete"] is True and bare["resources"]["submitit_jobs"] >= 1
    assert "slurm_partition" not in bare["default-resources"] and "slurm_account" not in bare["default-resources"]
    assert "cpus_per_task" not in bare["default-resources"]  # it would override cpus_per_gpu (plugin 2.x)
    assert bare["config"] == ["launcher={cluster: slurm}"]  # trainings go to Slurm at every scale
    for rule in GPU_RULES:
        assert bare["set-resources"][rule]["gpu"] == 1 and bare["set-resources"][rule]["cpus_per_gpu"] >= 1

    site = render(
        MTP_SLURM_PARTITION="cpu", MTP_SLURM_ACCOUNT="mtp", MTP_SLURM_GPU_PARTITION="gpu", MTP_SLURM_GRES="gpu:a100:1"
    )
    assert site["default-resources"]["slurm_partition"] == "cpu"
    assert site["default-resources"]["slurm_account"] == "mtp"
    decode = site["set-resources"]["decode_prompts"]
    assert decode["slurm_partition"] == "gpu" and decode["gres"] == "gpu:a100:1" and "gpu" not in decode

    model = render(MTP_SLURM_GPU_MODEL="h100")["set-resources"]["evaluate"]
    assert model["gpu"] == 1 and model["gpu_model"] == "h100"


def test_profile_runs_paper_scale(tmp_path):
    out = dry_run(tmp_path, site_env(MTP_SLURM_PARTITION="gpu", MTP_SLURM_ACCOUNT="mtp"))
    assert "qwen3-4b-instruct-2507" in out and "fetch_prompts_specbench" in out
    assert "smollm2" not in out  # the profile's configfile replaces config.yaml, no deep merge
    decode = resources_of(out, "decode_prompts")
    assert len(decode) == 4
    for res in decode:
        assert "gpu=1" in res and "cpus_per_gpu=8" in res, res
        assert "slurm_partition=gpu" in res and "slurm_account=mtp" in res, res


def test_profile_with_embedded_config(tmp_path):
    out = dry_run(tmp_path, site_env(), "--configfile", str(REPO / "config.yaml"))
    assert "smollm2-135m" in out and "qwen3-4b" not in out
    res = resources_of(out, "evaluate")
    assert res and "gpu=1" in res[0] and "slurm_account" not in res[0] and "slurm_partition" not in res[0], res
    assert "gpu=1" in resources_of(out, "p1_evaluate")[0]
    # the training rule is a local rule; its launcher submits the training to Slurm (the profile's config)
    train = re.search(r"mtp_core\.cli train .*--launcher '(\{.*?\})'", out)
    assert train and json.loads(train.group(1))["cluster"] == "slurm", out[-3000:]
    assert "submitit_jobs=1" in resources_of(out, "p1_train")[0]
