"""Decode costs measured on GPUs at the papers' model shapes, committed as data: `device_costs/<shape>_<device>.json`,
each written by `benchmarks/decode_costs.py` with its device, dtype, library versions, date, commit and command
(docs/benchmarks.md "GPU decode costs" reads them).

A file's `verify_eager` section is a cost table as `decoding.pricing.CostModel` takes it: a verification forward of
R rows relative to a one-row step, and the output head's share (for forwards that run only some layers, paper 4),
measured with the eager backend, the papers' regime. The leaderboard prices every row's recorded forwards by each
table (`DeviceTable.cost_model`): what the row's speed-up over greedy would be on that GPU at that shape, from the
forwards it really ran on the CPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..decoding.pricing import CostModel

DEVICE_COSTS_DIR = Path(__file__).with_name("device_costs")
SHAPE_TITLES = {"qwen3-4b": "Qwen3-4B", "llama-7b": "Llama-7B", "smollm2-135m": "SmolLM2-135M"}


@dataclass(frozen=True)
class DeviceTable:
    """One measured cost table (module docstring)."""

    key: str  # the file's stem, `<shape>_<device>`
    shape: str
    device: str
    dtype: str
    date: str
    table: dict[int, float]
    head: dict[int, float]

    @property
    def title(self) -> str:
        """E.g. `H200, Qwen3-4B`."""
        return f"{self.device.removeprefix('NVIDIA ')}, {SHAPE_TITLES.get(self.shape, self.shape)}"

    def cost_model(self) -> CostModel:
        return CostModel(self.table, online=False, head=self.head)


def read_table(path: Path) -> DeviceTable:
    """One committed file as a `DeviceTable` (its `verify_eager` section)."""
    d = json.loads(path.read_text())
    eager = d["verify_eager"]
    return DeviceTable(
        key=path.stem,
        shape=d["shape"],
        device=d["device"],
        dtype=d["dtype"],
        date=d["date"],
        table={int(r): float(c) for r, c in eager["table"].items()},
        head={int(r): float(c) for r, c in eager["head"].items()},
    )


def device_tables(where: Path = DEVICE_COSTS_DIR) -> list[DeviceTable]:
    """Every committed table, in file-name order."""
    return [read_table(p) for p in sorted(where.glob("*.json"))]
