"""What the examples share: a 1-D mesh of every rank, and a check against plain NumPy on every rank.

``mesh_from_args()`` (and ``mesh_and_args(parser)``, for a script's own options) is
``dt.init_device_mesh((N,))``: the MPI world under ``mpiexec -n N``, else ``--ranks``
simulated ranks (4 by default) in this process.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, Sequence

import numpy as np

import collectives
import dtensor_np as dt


def mesh_from_args(description: str, argv: Optional[Sequence[str]] = None) -> tuple[dt.DeviceMesh, str]:
    """The mesh (every MPI rank, or ``--ranks`` simulated ones) and the ``--default`` placement policy."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--default", choices=("shard_first", "shard_last"), default="shard_first",
                        help="the namespace's default placement of the inputs")
    mesh, args = mesh_and_args(parser, argv)
    return mesh, args.default


def mesh_and_args(parser: argparse.ArgumentParser,
                  argv: Optional[Sequence[str]] = None) -> tuple[dt.DeviceMesh, argparse.Namespace]:
    """The mesh (every MPI rank, or ``--ranks`` simulated ones) and ``parser``'s arguments (``--ranks`` added)."""
    parser.add_argument("--ranks", type=int, default=4, help="simulated ranks when not under mpiexec")
    args = parser.parse_args(argv)
    world = collectives.mpi_world_size() if collectives.launched_by_mpiexec() else None
    mesh = dt.init_device_mesh((world if world and world > 1 else args.ranks,))
    return mesh, args


def compare(name: str, got: Any, expected: Any, *, rtol: float = 1e-9, atol: float = 1e-12) -> str:
    """``got`` (a DTensor or a Python scalar) equals NumPy's ``expected`` on every rank this process holds.

    Returns a line saying where ``got`` lives and how far it is from NumPy; raises AssertionError on a mismatch.
    """
    if isinstance(got, dt.DTensor):
        full = got.full_tensor()  # a collective: every rank calls it
        where = f"{got.placements} on {got.mesh}, local shapes {[s.shape for s in got.local_shards().values()]}"
    else:
        full, where = np.asarray(got), f"a {type(got).__name__} on every rank"
    np.testing.assert_allclose(full, expected, rtol=rtol, atol=atol, err_msg=name)
    diff = float(np.max(np.abs(full - expected))) if np.size(expected) else 0.0
    return f"{name}: {where}; max |DTensor - NumPy| = {diff:.1e}"


def record(history: list) -> Callable[..., None]:
    """An ``on_step(n, loss, params)`` for a training loop on NumPy: keeps each step's loss and a copy of each
    parameter in ``history``."""
    return lambda n, loss, params: history.append((float(loss), [np.copy(p) for p in params]))


def report(reference: list) -> Callable[..., None]:
    """An ``on_step(n, loss, params)`` for the same loop on DTensors: prints the step's loss and how far the
    parameters are from NumPy's at that step (``reference``, kept by :func:`record`)."""
    def on_step(n: int, loss: Any, params: list) -> None:
        loss_np, expected = reference[n]
        worst = max(float(np.max(np.abs(p.full_tensor() - e))) for p, e in zip(params, expected))
        print(f"step {n:3d}: loss {float(loss):.6f} (NumPy {loss_np:.6f}), max |param - NumPy| = {worst:.1e}",
              flush=True)
    return on_step
