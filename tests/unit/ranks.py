"""Running a function on forked ranks of one gloo process group (CPU), and comparing the runs' curves and weights:
the helpers of the 2-process tests (test_distributed.py, test_p2_distributed.py).

Ranks are forked from the test process (no re-import of torch/transformers: a group of 2 starts in well under a
second) and meet through a `file://` rendezvous. A rank that raises writes its traceback next to its result file;
`run_ranks` fails with every rank's traceback.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import traceback
from pathlib import Path

import torch

from mtp_core.train import read_curves
from mtp_core.train.loop import WALL_CLOCK_COLUMNS

TOL = 5e-5  # max abs difference allowed between 1- and 2-process loss curves / weights (float32 sums)


def _child(rank, world, init, fn, out, args):
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
        try:
            res = fn(rank, world, *args)
        finally:
            dist.destroy_process_group()
        torch.save(res, out)
    except BaseException:
        with open(f"{out}.err", "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)


_groups = itertools.count()


def run_ranks(world, fn, tmp_path, *args, timeout=120):
    """Run fn(rank, world, *args) in `world` forked processes of one gloo group; their return values, by rank."""
    ctx = mp.get_context("fork")
    n = next(_groups)
    init = tmp_path / f"pg-{n}"  # a fresh rendezvous file per group
    outs = [tmp_path / f"group{n}-rank{r}.pt" for r in range(world)]
    procs = [ctx.Process(target=_child, args=(r, world, init, fn, outs[r], args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    errors = []
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            errors.append(f"rank {r}: still running after {timeout} s")
        elif p.exitcode:
            err = outs[r].with_name(outs[r].name + ".err")
            errors.append(f"rank {r} exited {p.exitcode}:\n{err.read_text() if err.exists() else ''}")
    assert not errors, "\n".join(errors)
    return [torch.load(o, weights_only=False) for o in outs]


def curves(d: Path) -> list[dict[str, float]]:
    """The rows of `d/curves.csv` without the wall-clock columns, as floats (empty cells left out)."""
    return [
        {k: float(v) for k, v in r.items() if k not in WALL_CLOCK_COLUMNS and v != ""}
        for r in read_curves(d / "curves.csv")
    ]


def max_diff(a_rows, b_rows, cols=("loss", "grad_norm")):
    """Largest difference of `cols` over the steps; a metric a step has no count for (empty) is empty in both."""
    assert [r["step"] for r in a_rows] == [r["step"] for r in b_rows]
    assert all(a.keys() == b.keys() for a, b in zip(a_rows, b_rows))
    return max(abs(a[c] - b[c]) for a, b in zip(a_rows, b_rows) for c in cols if c in a)


def weights_diff(a, b):
    """Largest absolute difference between two state dicts of the same keys."""
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)
