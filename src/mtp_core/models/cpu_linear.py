"""Linear layers on oneDNN's packed weights for inference on the CPU (model key `cpu_linear`, default `onednn`).

A decode step multiplies one row (or a few: a batch, a verification chunk) by every weight matrix. On the 2 cores
of an AMD EPYC (Zen 4), PyTorch's fp32 `F.linear` (MKL) read SmolLM2-135M's output head at about 11 GB/s for one
row, and oneDNN's linear on the same weight prepacked (the op inductor's frozen graphs call) at about 25 GB/s:
1.3-2.5x faster on a layer's weight from 1 to 16 rows, 2-4.4x on the output head (`benchmarks/cpu_matmul_rows.py`),
and eager greedy about 1.35x faster end to end (docs/measurements.md, "Eager linears on oneDNN"). The products are
the same sums in another order: outputs agree to float rounding, as MKL's own agree between one row alone and the
same row in a batch (neither is bit-equal).

`pack_linears` turns a model's `nn.Linear` modules of at least `MIN_PACKED_WEIGHT` weights into `PackedLinear` in
place (same parameters, state dict and hooks). Smaller ones stay on `F.linear`: a oneDNN call costs about 25 us
however small its weight, and it lost to MKL up to 576 x 192 weights (SmolLM2's key and value projections, and
every layer of the tests' tiny models), and won from 256 x 512 up (docs/measurements.md, "Eager linears on
oneDNN"). Its forward takes the packed path only where packing is sound and nothing differentiates or traces:
* no gradient is recorded (`torch.inference_mode` / `torch.no_grad`: decoding, evaluation, teacher forwards);
  a training step runs `F.linear`, so a model loaded for training is unaffected;
* not while `torch.compile` traces (the compiled backend's graphs keep `aten.linear`, which inductor lowers itself);
* float32 CPU tensors held as plain tensors (not FSDP2's DTensors);
and it repacks when the weight changed (its version counter or storage), so a pack never outlives its weights. The
pack is made on first use and left out of copies and pickles (`copy.deepcopy(model)` repacks on its own first use).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

CPU_LINEARS = ("onednn", "aten")  # the model key `cpu_linear` (config schema); `aten`: PyTorch's F.linear everywhere
DEFAULT_CPU_LINEAR = "onednn"  # the schema's default too (tests/unit/core/models/test_cpu_linear.py checks they agree)
MIN_PACKED_WEIGHT = 2**17  # weights of a linear worth packing (module docstring)


def _version(w: torch.Tensor) -> tuple[int, int | None]:
    """What identifies the weight's current values: its storage and in-place version (None for inference tensors,
    which cannot change outside inference mode)."""
    try:
        return w.data_ptr(), w._version
    except RuntimeError:
        return w.data_ptr(), None


class PackedLinear(torch.nn.Linear):
    """`nn.Linear` that multiplies by a oneDNN-packed copy of its weight when it may (module docstring)."""

    _packed: torch.Tensor | None = None
    _packed_for: tuple[int, int | None] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (
            torch.is_grad_enabled()
            or torch.compiler.is_compiling()
            or x.dtype != torch.float32
            or x.device.type != "cpu"
            or type(w.data) is not torch.Tensor
            or w.dtype != torch.float32
            or w.device.type != "cpu"
            or x.numel() == 0
        ):
            return F.linear(x, w, self.bias)
        key = _version(w)
        if self._packed_for != key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)
            self._packed_for = key
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")

    def __getstate__(self) -> dict[str, Any]:
        """Without the pack (an opaque oneDNN tensor copies and pickles cannot hold): a copy packs on first use."""
        state = dict(self.__dict__)
        state.pop("_packed", None)
        state.pop("_packed_for", None)
        return state


def pack_linears(
    model: torch.nn.Module, cpu_linear: str = DEFAULT_CPU_LINEAR, min_weight: int = MIN_PACKED_WEIGHT
) -> int:
    """Make every plain `nn.Linear` of `model` with at least `min_weight` weights a `PackedLinear` (in place) when
    `cpu_linear` is `onednn` and oneDNN is available; the number of modules changed."""
    if cpu_linear not in CPU_LINEARS:
        raise ValueError(f"cpu_linear must be one of {CPU_LINEARS}, got {cpu_linear!r}")
    if cpu_linear == "aten" or not torch.backends.mkldnn.is_available():
        return 0
    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear and module.weight.numel() >= min_weight:
            module.__class__ = PackedLinear
            n += 1
    return n
