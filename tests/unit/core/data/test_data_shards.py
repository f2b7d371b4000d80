"""Pretraining token shards: writer, index, reader, and the document sources (FineWeb code path on a local
directory, synthetic text)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from mtp_core.data import TokenShards, prepare_shards, token_dtype, write_shards
from mtp_core.data.pretrain import fineweb_documents
from mtp_core.io import BadRowError, ReadReport
from mtp_core.models.load import tiny_tokenizer
from tests.conftest import REPO

DOCS = ["hello world", "Ünïcödé text ✓", "a" * 50, "last document\nwith two lines"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def stream_text(tok, docs) -> list[int]:
    return [i for d in docs for i in [*tok(d, add_special_tokens=False).input_ids, tok.eos_token_id]]


def write(tok, out, docs=DOCS, max_tokens=10_000, shard_tokens=16, **kw):
    return write_shards(docs, tok, out, max_tokens, shard_tokens, tokenizer_name="tiny", source={"kind": "test"}, **kw)


def test_round_trip_decodes_documents_with_eos(tok, tmp_path):
    index = write(tok, tmp_path, batch_size=3)
    expected = stream_text(tok, DOCS)
    shards = TokenShards(tmp_path / "index.json")
    assert len(shards) == index["total_tokens"] == len(expected)
    tokens = shards.read(0, len(shards))
    assert tokens.tolist() == expected
    text = tok.decode(tokens.tolist())
    assert text == "".join(d + "<|im_end|>" for d in DOCS)
    assert index["total_docs"] == 4 and sum(s["docs"] for s in index["shards"]) == 4
    assert index["eos_id"] == tok.eos_token_id and index["vocab_size"] == len(tok) and index["tokenizer"] == "tiny"
    assert [s["file"] for s in index["shards"]] == [f"shard_{i:05d}.bin" for i in range(len(index["shards"]))]
    assert all(s["tokens"] == 16 for s in index["shards"][:-1]) and 0 < index["shards"][-1]["tokens"] <= 16
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(s["file"] for s in index["shards"]), "index.json"])
    raw = np.memmap(tmp_path / "shard_00000.bin", dtype=np.uint16, mode="r")
    assert raw.tolist() == expected[:16]


def test_dtype_choice():
    assert token_dtype(259) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32 and token_dtype(151_936) == np.uint32


def test_uint32_for_large_vocabularies(tok, tmp_path):
    class Big:  # a tokenizer whose vocabulary does not fit 16 bits
        eos_token_id = 70_000

        def __len__(self):
            return 70_001

        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[65_536 + len(t)] for t in texts]}

    index = write_shards(["ab", "abc"], Big(), tmp_path, 100, 3, tokenizer_name="big", source={})
    assert index["dtype"] == "uint32"
    assert TokenShards(tmp_path / "index.json").read(0, 4).tolist() == [65_538, 70_000, 65_539, 70_000]


def test_max_tokens_cuts_the_last_document_and_removes_stale_shards(tok, tmp_path):
    write(tok, tmp_path, shard_tokens=8)
    n_before = len(list(tmp_path.glob("shard_*.bin")))
    index = write(tok, tmp_path, max_tokens=20, shard_tokens=8)
    assert index["total_tokens"] == 20 and [s["tokens"] for s in index["shards"]] == [8, 8, 4]
    assert index["last_doc_truncated"] and index["total_docs"] == 1  # "hello world" (11 + EOS) fits, the next not
    assert len(list(tmp_path.glob("shard_*.bin"))) == 3 < n_before
    assert TokenShards(tmp_path / "index.json").read(0, 20).tolist() == stream_text(tok, DOCS)[:20]


def test_exact_fit_is_not_truncated(tok, tmp_path):
    n = len(stream_text(tok, DOCS[:1]))
    index = write(tok, tmp_path, max_tokens=n, shard_tokens=n)
    assert not index["last_doc_truncated"] and index["total_docs"] == 1 and len(index["shards"]) == 1


def test_empty_source_fails_without_leaving_files(tok, tmp_path):
    with pytest.raises(ValueError, match="no tokens"):
        write(tok, tmp_path, docs=[])
    assert not list(tmp_path.iterdir())


def test_reader_windows_and_validation(tok, tmp_path):
    write(tok, tmp_path, shard_tokens=7)
    shards = TokenShards(tmp_path / "index.json")
    full = shards.read(0, len(shards))
    batch = shards.sample(32, 10, np.random.default_rng(0))
    assert batch.shape == (32, 10) and batch.dtype == np.int64
    assert np.array_equal(batch, shards.sample(32, 10, np.random.default_rng(0)))
    for row in batch:  # each window is a contiguous slice of the stream (often across shard boundaries)
        starts = [s for s in range(len(full) - 9) if np.array_equal(full[s : s + 10], row)]
        assert starts
    assert shards.read(5, 9).tolist() == full[5:14].tolist()
    with pytest.raises(IndexError):
        shards.read(len(full) - 2, 5)
    with pytest.raises(ValueError, match="exceeds"):
        shards.sample(1, len(full) + 1, np.random.default_rng(0))
    index = json.loads((tmp_path / "index.json").read_text())
    index["shards"][0]["tokens"] += 1
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="shard_00000.bin"):
        TokenShards(tmp_path / "index.json")


def write_fineweb_dir(path, rows_a, rows_b):
    path.mkdir()
    (path / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_a), encoding="utf-8")
    (path / "part-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_b), encoding="utf-8")
    return path


def test_fineweb_code_path_on_a_local_directory(tok, tmp_path):
    d = write_fineweb_dir(
        tmp_path / "fineweb",
        [{"text": "first doc", "id": "a"}, {"text": "second", "id": "b"}],
        [{"text": "third one", "id": "c"}],
    )
    spec = {
        "kind": "pretrain_text",
        "source": "fineweb",
        "path": str(d),
        "name": None,
        "tokenizer": "tiny-llama",
        "max_tokens": 1000,
        "shard_tokens": 8,
    }
    index = prepare_shards(spec, tok, tmp_path / "shards", tokenizer_name="tiny-llama", seed=0)
    assert index["source"] == {"kind": "fineweb", "path": str(d), "name": None}
    text = tok.decode(TokenShards(tmp_path / "shards" / "index.json").read(0, index["total_tokens"]).tolist())
    assert sorted(text.split("<|im_end|>")[:-1]) == ["first doc", "second", "third one"]


def test_fineweb_bad_rows(tmp_path):
    d = write_fineweb_dir(
        tmp_path / "fw", [{"text": "ok", "id": "a"}, {"text": "", "id": "b"}], [{"text": "z", "id": "c"}]
    )
    with pytest.raises(BadRowError, match="field 'text' is empty"):
        list(fineweb_documents(str(d), None, "error", ReadReport(str(d))))
    report = ReadReport(str(d))
    assert len(list(fineweb_documents(str(d), None, "skip", report))) == 2 and report.skipped == 1


def test_synthetic_source_and_index_fields(tok, tmp_path):
    spec = {
        "kind": "pretrain_text",
        "source": "synthetic",
        "tokenizer": "tiny-llama",
        "max_tokens": 3000,
        "shard_tokens": 1000,
    }
    index = prepare_shards(spec, tok, tmp_path, tokenizer_name="tiny-llama", seed=0)
    assert index["total_tokens"] == 3000 and len(index["shards"]) == 3
    assert index["source"] == {"kind": "synthetic", "seed": 0} and index["skipped_rows"] == 0
    assert "The answer is: " in tok.decode(TokenShards(tmp_path / "index.json").read(0, 3000).tolist())
    again = prepare_shards(spec, tok, tmp_path / "again", tokenizer_name="tiny-llama", seed=0)
    assert again["shards"] == index["shards"]
    assert (tmp_path / "shard_00001.bin").read_bytes() == (tmp_path / "again" / "shard_00001.bin").read_bytes()


def test_prepare_shards_script(tok, tmp_path, monkeypatch):
    """The workflow script: tokenizer from a prepared checkpoint directory, stderr to the rule's log."""
    import runpy
    import sys

    monkeypatch.setattr(sys, "stderr", sys.stderr)  # the script redirects it to the log file
    for key in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):  # and sets these
        monkeypatch.delenv(key, raising=False)

    model_dir = tmp_path / "model"
    tok.save_pretrained(model_dir)
    spec = {
        "kind": "pretrain_text",
        "source": "synthetic",
        "tokenizer": "tiny-llama",
        "max_tokens": 500,
        "shard_tokens": 200,
    }
    smk = SimpleNamespace(
        threads=1,
        input={},
        log=[str(tmp_path / "log.txt")],
        output=SimpleNamespace(index=str(tmp_path / "shards" / "index.json")),
        params=SimpleNamespace(
            spec=spec,
            model={"source": "tiny", "name": "tiny-llama"},
            model_dir=str(model_dir),
            seed=0,
            on_bad_row="error",
        ),
    )
    script = REPO / "workflow" / "scripts" / "prepare_shards.py"
    runpy.run_path(str(script), init_globals={"snakemake": smk}, run_name="__main__")
    index = json.loads((tmp_path / "shards" / "index.json").read_text())
    assert index["total_tokens"] == 500 and index["tokenizer"] == "tiny-llama"
    assert (tmp_path / "log.txt").exists()


def test_rows_source_renders_like_training(tok, tmp_path):
    """Source rows: each (query, response) row is one document, rendered as a training on the rows renders it
    (here the chat template), followed by the EOS; a bad row names file and row."""
    rows = tmp_path / "train.jsonl"
    rows.write_text(
        json.dumps({"query": "What is 2+3?", "response": "2+3=5. The answer is: 5"})
        + "\n"
        + json.dumps({"query": "Say hi", "response": "hi"})
        + "\n"
    )
    spec = {"kind": "pretrain_text", "source": "rows", "dataset": "math", "tokenizer": "tiny-llama", "max_tokens": 10_000,
            "shard_tokens": 64}  # fmt: skip
    index = prepare_shards(spec, tok, tmp_path / "s", tokenizer_name="tiny-llama", seed=0, rows=rows, template="chat")
    assert index["source"] == {"kind": "rows", "dataset": "math", "split": "train"} and index["total_docs"] == 2
    text = tok.decode(TokenShards(tmp_path / "s" / "index.json").read(0, index["total_tokens"]).tolist())
    assert text.startswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n2+3=5.")
    rows.write_text(json.dumps({"query": "x"}) + "\n")
    with pytest.raises(BadRowError, match="response"):
        prepare_shards(spec, tok, tmp_path / "bad", tokenizer_name="tiny-llama", seed=0, rows=rows, template="chat")
