"""Decode costs measured on GPUs at the papers' model shapes, committed as data: `device_costs/<shape>_<device>.json`,
each written by `benchmarks/decode_costs.py` with its device, dtype, library versions, date, commit and command
(docs/measurements.md "The fast decode path" shows them).

A file's `verify_eager` section is a cost table as `decoding.pricing.CostModel` takes it: a verification forward of
R rows relative to a one-row step, and the output head's share (for forwards that run only some layers, paper 4),
measured with the eager backend, the papers' regime. The leaderboard prices every row's recorded forwards by each
table (`DeviceTable.cost_model`): what the row's speed-up over greedy would be on that GPU at that shape, from the
forwards it really ran on the CPU. `markdown` and `drafters_markdown` render any such files (the CPU's are in
benchmarks/results) as docs/measurements.md shows them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def committed_files() -> list[Path]:
    """The committed measurement files, in name order."""
    return sorted(DEVICE_COSTS_DIR.glob("*.json"))


def device_tables() -> list[DeviceTable]:
    """Every committed table, in file-name order."""
    return [read_table(p) for p in committed_files()]


def _setting(d: dict) -> str:
    """A file's first three table cells: shape, device and dtype (and on the CPU the linears' kernel where the file
    records it, `models.cpu_linear`), and the batch of its `speed` section."""
    kernel = f", {d['cpu_linear']} linears" if d.get("cpu_linear") else ""
    device = f"{d['device']}, {d['dtype']}{kernel}"
    return f"{SHAPE_TITLES.get(d['shape'], d['shape'])} | {device} | {d['speed']['batch_size']}"


def markdown(paths: Sequence[Path] | None = None) -> str:
    """Measurements of `benchmarks/decode_costs.py` (default: the committed GPU files) as docs/measurements.md shows
    them: per file, greedy's speed on each backend against the bandwidth floor, and the verification and DMTD
    prices where the file has them (`python -m mtp_core.bench.device_costs [FILE ...]`)."""
    lines = [
        "| shape | device | batch | greedy tok/s: eager / HF generate / compiled (compile s) | compiled × HF "
        "| floor tok/s | compiled / floor | one-row step ms: eager / compiled | 64 rows × one row: eager / compiled "
        "| DMTD τ 3 modeled × |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in committed_files() if paths is None else paths:
        d = json.loads(Path(path).read_text())
        speed = d["speed"]["decoders"]
        floor = d["speed"]["batch_size"] / d["bandwidth"]["floor_s_per_step"]  # a step reads the weights once
        eager, compiled = d.get("verify_eager"), d.get("verify_compiled")
        step = f"{1000 * eager['one_row_s']:.1f} / {1000 * compiled['one_row_s']:.2f}" if compiled else "-"
        rows64 = f"{eager['table']['64']:.2f} / {compiled['table']['64']:.2f}" if compiled else "-"
        dmtd = f"{d['dmtd']['modeled_speedup']['3']:.2f}" if "dmtd" in d else "-"
        g, hf, c = (speed[k]["tokens_per_s"] for k in ("greedy", "hf-greedy", "greedy-compiled"))
        lines.append(
            f"| {_setting(d)} | {g:.1f} / {hf:.1f} / {c:.1f} ({speed['greedy-compiled']['compile_s']:.0f}) | {c / hf:.2f} "
            f"| {floor:.0f} | {c / floor:.0%} | {step} | {rows64} | {dmtd} |"
        )
    return "\n".join(lines)


def drafters_markdown(paths: Sequence[Path]) -> str:
    """The `drafters` sections of `paths` (files without one are skipped): each drafter decoded end to end beside
    greedy on the compiled backend, its tok/s against compiled greedy's, tokens per forward, compile seconds (kept
    out of tok/s) and, for a lossless one, whether it emitted compiled greedy's tokens on every prompt. The batch is
    the file's `speed` section's: `benchmarks/decode_costs.py` runs both sections at its `--batch-size`."""
    lines = [
        "| shape | device | batch | decoder | tok/s | × compiled greedy | tokens per forward | compile s "
        "| compiled greedy's tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        d = json.loads(Path(path).read_text())
        if "drafters" not in d:
            continue
        rows = d["drafters"]
        base, where = rows["greedy-compiled"]["tokens_per_s"], _setting(d)
        for name, r in rows.items():
            same = {True: "yes", False: "no", None: "- (lossy)"}[r["identical_to_compiled_greedy"]]
            lines.append(
                f"| {where} | {name} | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / base:.2f} "
                f"| {r['tokens_per_forward']['mean']:.2f} | {r['compile_s']:.0f} | {same} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    files = [Path(p) for p in sys.argv[1:]]
    print(markdown(files or None))
    if any("drafters" in json.loads(p.read_text()) for p in files):
        print()
        print(drafters_markdown(files))
