"""A paper-scale run that cannot launch stops at the plan check, before any job, naming the run or dataset and the
key: the rehearsal config (config/paper.yaml + config/rehearsal.yaml, merged as Snakemake merges them) with one
thing broken at a time: a launcher whose strategy cannot run its processes, a dataset file in the wrong format, a
missing column, a missing file."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml
from snakemake.utils import update_config

from mtp_core.config.settings import ConfigError
from mtp_core.data.sources import check_source, first_record
from mtp_core.validation import validate_config
from tests.conftest import REPO


@pytest.fixture(scope="module")
def rehearsal() -> dict:
    config = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "config/rehearsal.yaml").read_text()))
    return config


def _with(config: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(config)
    node = out
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    return out


def test_the_rehearsal_passes_its_plan_check(rehearsal):
    validate_config(copy.deepcopy(rehearsal))


@pytest.mark.parametrize(
    "where,launcher,message",
    [
        # HSDP replica groups that do not divide the processes: FSDP2 cannot build its device mesh
        (
            ("papers", "p2", "runs", "mtpd_k1"),
            {"fsdp_replicate": 3},
            r"papers\.p2\.runs\.mtpd_k1\.launcher: .*fsdp_replicate",
        ),
        # a strategy without FSDP would silently drop the configured mixed precision
        (("papers", "p4"), {"strategy": "ddp"}, r"papers\.p4\.runs\.\w+\.launcher: .*fsdp_param_dtype"),
        # one process per GPU: 2 GPUs for 4 processes cannot be mapped
        (
            ("papers", "p1"),
            {"tasks_per_node": 4, "gpus_per_node": 2},
            r"papers\.p1\.runs\.\w+\.launcher: .*gpus_per_node",
        ),
        # one process cannot hold a group of 2
        (("papers", "p1"), {"strategy": "none"}, r"papers\.p1\.runs\.\w+\.launcher: .*strategy"),
    ],
)
def test_a_training_that_cannot_launch_is_refused_naming_its_run_and_key(rehearsal, where, launcher, message):
    node = rehearsal
    for k in where:
        node = node[k]
    bad = _with(rehearsal, (*where, "launcher"), {**(node.get("launcher") or {}), **launcher})
    with pytest.raises(ConfigError, match=message):
        validate_config(bad)


def _metamathqa_rows(**drop):
    rows = [{"query": "2+2?", "response": "4. The answer is: 4", "type": "GSM_AnsAug", "original_question": "2+2?"}]
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def test_a_missing_column_is_refused_naming_the_dataset_key_file_and_row(rehearsal, tmp_path):
    f = tmp_path / "MetaMathQA-395K.json"
    f.write_text(json.dumps(_metamathqa_rows(type=1)))
    with pytest.raises(ConfigError, match=rf"datasets\.math\.path: {f}: row 1: missing field 'type'"):
        validate_config(_with(rehearsal, ("datasets", "math", "path"), str(f)))


def test_a_file_in_the_wrong_format_is_refused(rehearsal, tmp_path):
    f = tmp_path / "MetaMathQA-395K.json"
    f.write_text(json.dumps({"rows": _metamathqa_rows()}))  # an object, not the hub file's array
    with pytest.raises(ConfigError, match=r"datasets\.math\.path: .*expected a JSON array"):
        validate_config(_with(rehearsal, ("datasets", "math", "path"), str(f)))
    csv = tmp_path / "rows.csv"
    csv.write_text("query,response\n")
    with pytest.raises(ConfigError, match=r"datasets\.math\.path: .*not a data file"):
        validate_config(_with(rehearsal, ("datasets", "math", "path"), str(csv)))


def test_a_hub_layout_folder_missing_a_column_is_refused(rehearsal, tmp_path, datasets_cache_in_tmp):
    folder = tmp_path / "gsm8k"
    (folder / "main").mkdir(parents=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: test\n    path: main/test-*\n---\n"
    )
    pd.DataFrame({"question": ["q"], "solution": ["#### 4"]}).to_parquet(folder / "main/test-00000-of-00001.parquet")
    bad = _with(rehearsal, ("datasets", "math", "test"), {"path": str(folder), "name": "main", "split": "test"})
    with pytest.raises(
        ConfigError, match=r"datasets\.math\.test\.path: .*test-00000-of-00001\.parquet: row 1: missing field 'answer'"
    ):
        validate_config(bad)
    pd.DataFrame({"question": ["q"], "answer": ["so\n#### 4"]}).to_parquet(folder / "main/test-00000-of-00001.parquet")
    validate_config(bad)  # the same folder with the column passes


def test_conversations_pretraining_text_and_prompt_files_are_checked(rehearsal, tmp_path, datasets_cache_in_tmp):
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ConfigError, match=r"datasets\.magpie\.path\[1\]: .*missing field 'conversations'"):
        validate_config(_with(rehearsal, ("datasets", "magpie", "path"), ["org/first", str(chats)]))
    text = tmp_path / "fineweb"
    text.mkdir()
    pd.DataFrame({"content": ["a document"]}).to_parquet(text / "000_00000.parquet")
    with pytest.raises(ConfigError, match=r"datasets\.fineweb_edu_350bt\.path: .*missing field 'text'"):
        validate_config(
            _with(
                rehearsal,
                ("datasets", "fineweb_edu_350bt"),
                {**rehearsal["datasets"]["fineweb_edu_350bt"], "path": str(text), "name": None},
            )
        )
    prompts = tmp_path / "question.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "text": "no turns"}) + "\n")
    with pytest.raises(ConfigError, match=r"prompt_sets\.specbench\.path: .*needs one of the fields"):
        validate_config(_with(rehearsal, ("prompt_sets", "specbench"), {"source": "jsonl", "path": str(prompts)}))


def test_a_missing_local_file_is_refused_but_hub_ids_and_rule_outputs_are_not_read(rehearsal, tmp_path):
    with pytest.raises(ConfigError, match=r"datasets\.math\.path: ./data/MetaMathQA\.json: no such file"):
        validate_config(_with(rehearsal, ("datasets", "math", "path"), "./data/MetaMathQA.json"))
    check_source("k", "meta-math/MetaMathQA", lambda r: 1 / 0)  # a hub id: nothing local to read
    check_source("k", "results/hub/datasets/x/y", lambda r: 1 / 0)  # a rule writes it


def test_first_record_reads_each_format(tmp_path):
    rows = _metamathqa_rows()
    (tmp_path / "a.jsonl").write_text("\n" + json.dumps(rows[0]) + "\n")
    (tmp_path / "a.json").write_text("  [\n " + json.dumps(rows[0]) + ', {"x": 1}]')
    pd.DataFrame(rows).to_parquet(tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.json", "a.parquet"):
        assert first_record(tmp_path / name) == (tmp_path / name, rows[0])
