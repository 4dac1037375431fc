"""Explicit steps of the 2-D heat equation, written for one machine, run unchanged on a sharded grid.

``heat_steps(u)`` is plain Array API code: a five-point Laplacian from shifted
slices, written into the interior by item assignment (on a DTensor,
``lap[1:-1, 1:-1] = ...`` rebinds ``lap``; nothing is written in place).  The
grid stays sharded: a slice shifted along the sharded dim moves only the rows
that change owner (one all_to_all each, the halo), and the rest is local.

    python examples/heat_stencil.py                     # 4 simulated ranks in this process
    python examples/heat_stencil.py --ranks 2 --default shard_last
    mpiexec -n 2 python examples/heat_stencil.py
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_from_args


def heat_steps(u: Any, alpha: float = 0.2, steps: int = 10) -> Any:
    """``steps`` forward-Euler steps of ``du/dt = alpha * laplacian(u)``, the boundary held fixed."""
    xp = u.__array_namespace__()
    for _ in range(steps):
        lap = xp.zeros_like(u)
        lap[1:-1, 1:-1] = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        u = u + alpha * lap
    return u


def main(argv: Optional[Sequence[str]] = None) -> None:
    mesh, default = mesh_from_args(__doc__.splitlines()[0], argv)
    xp = dt.array_api.namespace(mesh, default=default)
    u0 = np.zeros((19, 11))
    u0[0, :] = 1.0  # a hot edge
    u0[9, 5] = 10.0  # a hot spot
    u = heat_steps(xp.asarray(u0), steps=25)
    print(dt.visualize_sharding(u), flush=True)
    print(compare("temperature after 25 steps", u, heat_steps(u0, steps=25)), flush=True)


if __name__ == "__main__":
    main()
