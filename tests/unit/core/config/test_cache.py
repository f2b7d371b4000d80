"""`config.settings.cached_json`: a value built once per stamp in the user's cache, read back afterwards, and the
oldest files of a kind removed beyond the newest `CACHE_KEEP`."""

from __future__ import annotations

import os

import pytest

from mtp_core.config import settings


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_REPRO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_built_once_then_read_back(cache):
    calls = []
    build = lambda: calls.append(1) or {"a": [1, 2]}  # noqa: E731
    assert settings.cached_json("thing", "s1", build) == {"a": [1, 2]}
    assert settings.cached_json("thing", "s1", build) == {"a": [1, 2]} and len(calls) == 1
    (cache / "thing-s1.json").write_text('{"a": "from the file"}')
    assert settings.cached_json("thing", "s1", build) == {"a": "from the file"}


def test_the_oldest_stamps_of_a_kind_go(cache):
    for i in range(settings.CACHE_KEEP + 2):
        settings.cached_json("thing", f"s{i}", lambda: {})
        os.utime(cache / f"thing-s{i}.json", (1000 + i, 1000 + i))  # s0 the oldest
    settings.cached_json("other", "x", lambda: {})  # another kind is not counted against this one
    kept = sorted(p.name for p in cache.glob("thing-*.json"))
    assert kept == [f"thing-s{i}.json" for i in range(2, settings.CACHE_KEEP + 2)]
    assert (cache / "other-x.json").is_file()


def test_a_cache_that_cannot_be_written_builds_each_time(tmp_path, monkeypatch, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would be
    monkeypatch.setenv("MTP_REPRO_CACHE", str(blocked))
    calls = []
    for _ in range(2):
        assert settings.cached_json("thing", "s", lambda: calls.append(1) or [1]) == [1]
    assert len(calls) == 2 and "thing not cached" in caplog.text
