"""The seeded random (source, target) placements that ``planner.py`` and ``torch_planner.py`` plan.

One generator for both, free of dtensor_np and torch (each script passes its own placement
objects, listed in the same order), so that the two libraries plan the same pairs.

Example:
    >>> draw((2, 2), 1, 0, "ab", "xy") == draw((2, 2), 1, 0, "ab", "xy")
    True
"""

from __future__ import annotations

import random
from typing import Sequence, TypeVar

P = TypeVar("P")


def draw(mesh_shape: tuple[int, ...], n: int, seed: int, sources: Sequence[P], targets: Sequence[P]) -> list[tuple[tuple[P, ...], tuple[P, ...]]]:
    """``n`` (source, target) placement tuples for a mesh: each mesh dim's source from ``sources`` and
    target from ``targets``; the same for a given (mesh, seed) and lists of the same lengths."""
    rng = random.Random(f"{seed}:{mesh_shape}")
    out = []
    for _ in range(n):
        src = tuple(rng.choice(sources) for _ in mesh_shape)
        dst = tuple(rng.choice(targets) for _ in mesh_shape)
        out.append((src, dst))
    return out
