"""Shared I/O: bad rows name file and row (or are counted when skipped); writes are atomic."""

from __future__ import annotations

import json
import os
import stat

import pytest

from mtp_core.io import (
    BadRowError,
    ReadReport,
    atomic_dir,
    atomic_path,
    atomic_write_json,
    read_jsonl,
    require_text_fields,
    stable_hash,
)


@pytest.fixture()
def messy(tmp_path):
    p = tmp_path / "rows.jsonl"
    lines = ['{"a": "x"}', "", '{"a": ""}', "not json", "[1, 2]", '{"b": "y"}', '{"a": "z"}']
    p.write_bytes(("\n".join(lines) + "\n").encode() + b'{"a": "\xff"}\n')
    return p


@pytest.mark.parametrize(
    "validate, row, reason",
    [(None, 4, "undecodable line"), (require_text_fields("a"), 3, "field 'a' is empty")],
)
def test_errors_name_file_and_row(messy, validate, row, reason):
    with pytest.raises(BadRowError) as e:
        list(read_jsonl(messy, validate))
    assert e.value.row == row and e.value.path == str(messy) and reason in str(e.value)
    assert str(e.value).startswith(f"{messy}: row {row}: ")


def test_skip_mode_counts_and_keeps_good_rows(messy):
    report = ReadReport(str(messy))
    rows = list(read_jsonl(messy, require_text_fields("a"), "skip", report))
    assert rows == [{"a": "x"}, {"a": "z"}]
    assert report.rows_read == 2 and report.skipped == 5
    assert [e.split(": ")[1] for e in report.examples] == ["row 3", "row 4", "row 5", "row 6", "row 8"]
    with pytest.raises(ValueError, match="on_bad_row"):
        list(read_jsonl(messy, on_bad_row="ignore"))


def test_atomic_writes_leave_nothing_on_failure(tmp_path):
    target = tmp_path / "out.json"
    atomic_write_json(target, {"x": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("partial")
        raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_writes_get_the_mode_of_a_plain_write(tmp_path):
    """Readable by the group and others under umask 022 (a lab sharing `results/`), as `open` and `mkdir` make them;
    not the private mode of a temporary file."""
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "out.json", {"x": 1})
        with atomic_dir(tmp_path / "model") as d:
            (d / "weights.bin").write_bytes(b"w")
        os.umask(0o077)
        atomic_write_json(tmp_path / "private.json", {"x": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600


def test_stable_hash_ignores_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1}) != stable_hash({"a": 2})
