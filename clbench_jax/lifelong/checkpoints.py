"""One orbax checkpoint per finished lifelong stage: arrays (params, algorithm state, optimizer state) and a JSON
record (curves, success-matrix rows, logs). orbax writes into a temporary folder and renames it when complete, so
a killed run leaves only whole stages behind."""

from __future__ import annotations

import os
from typing import Any

import orbax.checkpoint as ocp


class StageCheckpoints:
    def __init__(self, directory: str | os.PathLike):
        self.directory = os.path.abspath(os.fspath(directory))
        opts = ocp.CheckpointManagerOptions(max_to_keep=None, create=True, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(self.directory, options=opts)

    def latest(self) -> int | None:
        return self.manager.latest_step()

    def save(self, stage: int, arrays: Any, record: dict) -> None:
        self.manager.save(stage, args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays),
                                                         record=ocp.args.JsonSave(record)))
        self.manager.wait_until_finished()

    def restore(self, stage: int, like: Any, partial: bool = False) -> tuple[Any, dict]:
        """Arrays shaped like `like` (a pytree of the same structure; with `partial`, of some of the saved
        top-level entries, e.g. a finished run's params without its optimizer state) and the JSON record of `stage`.

        Shape-only leaves (jax.ShapeDtypeStruct) are placed on this process's first device: without a sharding,
        orbax falls back to the one saved in the checkpoint, and a stage written on another machine (a GPU run
        resumed on a CPU) then fails with "Topology mismatch"."""
        import jax

        dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=dev)
                            if isinstance(x, jax.ShapeDtypeStruct) and x.sharding is None else x, like)
        if partial:
            args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(sharding=getattr(x, "sharding", None) or dev), like)
            arrays = ocp.args.PyTreeRestore(like, restore_args=args, partial_restore=True)
        else:
            arrays = ocp.args.StandardRestore(like)
        out = self.manager.restore(stage, args=ocp.args.Composite(arrays=arrays, record=ocp.args.JsonRestore()))
        return out["arrays"], out["record"]

    def close(self) -> None:
        self.manager.close()
