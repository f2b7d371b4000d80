"""The launcher's `toy` method for its tests: a small MLP regression on the generic training loop, a job of one
`import torch` plus milliseconds of training; settings for failure and signal drills (`toy_check`).

Launch it as `launch(out, TOY, ...)` or `--method tests.toy_method:METHOD` on the command line
(the job's processes import `tests.toy_method`: the repository root is on their PYTHONPATH, tests/conftest.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtp_core.config.registry import Method
from mtp_core.train.launch.methods import known_keys

TOY_KEYS = ("train", "rows", "dim", "seed", "fail_at_step", "step_sleep_s", "fail_on_rank", "startup_sleep_s")


class ToyData:
    def __init__(self, rows: int, dim: int, seed: int):
        import torch

        from mtp_core.train.loop import ShuffledOrder

        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(rows, dim, generator=g)
        self.y = self.x @ torch.randn(dim, generator=g) + 0.1 * torch.randn(rows, generator=g)
        self.order = ShuffledOrder(rows, seed=seed)

    def micro_batch(self, spec: Any) -> Any:
        import torch

        idx = torch.from_numpy(self.order.indices(spec.start, spec.size))
        return self.x[idx], self.y[idx]


class ToyStep:
    metric_names = ["mse"]

    def __init__(self, fail_at_step: int | None, step_sleep_s: float, fail_on_rank: int | None):
        self.fail_at_step, self.step_sleep_s, self.fail_on_rank = fail_at_step, step_sleep_s, fail_on_rank

    def __call__(self, model: Any, batch: Any, ctx: Any) -> Any:
        from mtp_core.train.loop import StepOutput

        if ctx.micro_index == 0:
            if (
                self.fail_at_step is not None
                and ctx.step + 1 == self.fail_at_step
                and self.fail_on_rank in (None, ctx.rank)
            ):
                raise RuntimeError(f"toy: failing on purpose at step {ctx.step + 1} (rank {ctx.rank})")
            if self.step_sleep_s:
                time.sleep(self.step_sleep_s)
        x, y = batch
        err = (model(x).squeeze(-1) - y) ** 2
        return StepOutput(
            loss=err.mean(), weight=float(len(y)), metrics={"mse": (err.sum().detach(), len(y))}, tokens=len(y)
        )


def _save_state_dict(model: Any, path: Path) -> None:
    import torch

    from mtp_core.io import atomic_path

    path.mkdir(parents=True, exist_ok=True)
    with atomic_path(path / "model.pt") as tmp:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)


def toy_check(settings: dict) -> dict:
    """`toy` settings: `train` (TrainConfig keys), `rows`, `dim`, `seed`; for tests of failure and signal
    handling: `fail_at_step` (raise at that step), `fail_on_rank`, `step_sleep_s` (sleep per step),
    `startup_sleep_s` (sleep before training when no checkpoint exists yet: a slow model load)."""
    from mtp_core.train.config import TrainConfig

    known_keys(settings, TOY_KEYS, "toy settings")
    if "train" not in settings:
        raise ValueError("toy settings: 'train' is required")
    TrainConfig.from_dict(settings["train"])
    return dict(settings)


def toy_entry(settings: dict, run_dir: Path, *, dist: Any, device: Any, callbacks: Sequence[Any] = ()) -> Any:
    """A linear regression (dim -> 1) trained by the generic loop; the final weights go to `model/model.pt`."""
    import torch

    from mtp_core.train.config import TrainConfig
    from mtp_core.train.loop import train

    dim, seed = int(settings.get("dim", 8)), int(settings.get("seed", 0))
    cpu_rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    torch.random.set_rng_state(cpu_rng)
    step = ToyStep(settings.get("fail_at_step"), float(settings.get("step_sleep_s", 0.0)), settings.get("fail_on_rank"))
    from mtp_core.train.checkpoint import latest_checkpoint

    if settings.get("startup_sleep_s") and latest_checkpoint(Path(run_dir) / "checkpoints") is None:
        print("toy: loading (startup_sleep_s)", flush=True)
        time.sleep(float(settings["startup_sleep_s"]))
    return train(
        step,
        model,
        ToyData(int(settings.get("rows", 64)), dim, seed),
        TrainConfig.from_dict(settings["train"]),
        run_dir,
        dist=dist,
        device=device,
        callbacks=callbacks,
        export_fn=_save_state_dict,
    )


METHOD = Method("toy", "tests.toy_method:toy_entry", "tests.toy_method:toy_check")
TOY = "tests.toy_method:METHOD"  # the method as `launch` and the command line name it

# Settings of a short toy run (12 steps of 4 micro-batches), as the launcher tests pass them.
TRAIN = {
    "max_steps": 12,
    "global_batch_size": 8,
    "micro_batch_size": 2,
    "lr": 0.02,
    "warmup_steps": 2,
    "checkpoint_every": 5,
    "progress": False,
    "log_every": 0,
}


def toy(**kw):
    train_kw = kw.pop("train", {})
    return {"train": {**TRAIN, **train_kw}, **kw}
