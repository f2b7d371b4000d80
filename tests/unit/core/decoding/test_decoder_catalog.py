"""The decoder catalog of the plan checks: the registered classes' names and parameters, cached under a stamp of
the source; a check against it says what a check against the classes says."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mtp_core.decoding import catalog
from mtp_core.decoding.base import decoder_class, decoders
from mtp_core.io import InputError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_REPRO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_catalog_is_every_registered_class_its_parameters_and_backends(cache):
    expected = {name: {"params": cls.accepted_params(), "backends": cls.BACKENDS} for name, cls in decoders().items()}
    assert catalog.catalog() == expected and {"greedy", "conf-adapt", "medusa", "probing", "dmtd", "entmtp"} <= set(
        expected
    )
    assert expected["greedy"]["backends"] == ("eager", "compiled") and "backend" in expected["medusa"]["params"]
    (written,) = cache.glob("decoders-*.json")
    read = {name: {k: tuple(v) for k, v in entry.items()} for name, entry in json.loads(written.read_text()).items()}
    assert read == expected


def test_a_cached_catalog_is_read_without_importing_torch(cache):
    catalog.catalog()  # fills the cache
    code = "import sys; from mtp_core.decoding.catalog import catalog; c = catalog(); print(len(c), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(decoders())), "False"]


def test_a_stale_catalog_is_never_read(cache, monkeypatch):
    """The cached catalog is what a check reads, until any source file changes: then a new stamp, a new one."""
    cache.mkdir(parents=True)
    (cache / f"decoders-{catalog._source_stamp()}.json").write_text('{"planted": {"params": [], "backends": []}}')
    assert catalog.catalog() == {"planted": {"params": (), "backends": ()}}
    real = catalog.Path.read_bytes
    edited = catalog.Path(catalog.__file__).resolve().parent / "greedy.py"
    monkeypatch.setattr(catalog.Path, "read_bytes", lambda p: real(p) + (b"#" if p == edited else b""))
    catalog._source_stamp.cache_clear()  # a new process after the edit
    assert "greedy" in catalog.catalog()


@pytest.mark.parametrize(
    "label, params",
    [
        ("greedy", {}),
        ("nope", {}),
        ("greedy", {"k": 3}),
        ("static-k4", {"decoder": "static-k", "k": 4}),
        ("static-k4", {"decoder": "static-k", "kk": 4}),
        ("medusa", {"heads": "h", "tree": "mc_sim_7b_63"}),
        ("greedy", {"backend": "compiled"}),
        ("greedy", {"backend": "fast"}),
        ("medusa", {"heads": "h", "backend": "compiled"}),
    ],
)
def test_check_decoder_says_what_decoder_class_says(cache, label, params):
    try:
        expected = decoder_class(label, params).name
    except InputError as e:
        with pytest.raises(InputError, match=str(e).replace("(", r"\(").replace(")", r"\)")):
            catalog.check_decoder(label, params)
    else:
        assert catalog.check_decoder(label, params) == expected
