"""Conway's Game of Life, written for one machine, run unchanged on a row-sharded board.

``life`` is the NumPy program people write for one machine: on a torus the
eight neighbours are shifted copies of the board (``np.roll``); in a box of
dead cells the board gets a frame (``np.pad``) and the neighbours are the
eight shifted slices of the framed board, as in Nicolas Rougier's "From Python
to NumPy", which also updates the board in place through a view of its
interior (``Z[1:-1, 1:-1][birth | survive] = 1``).  Every generation keeps the
previous one (``np.copy``) and counts the living cells and the cells that
changed (``np.count_nonzero``).  None of it names dtensor_np: ``main`` places
the board on the mesh by rows and gathers the results to compare them with
NumPy.  The board stays sharded by rows and is never gathered: a slice along
the rows moves the halo rows between neighbours (one all_to_all), and so
does a roll along the rows (one all_to_all of the rows that change owner); on
4 ranks a generation on the torus makes 6 all_to_alls (the 6 shifts with a
row offset), one in the box 9 (writing the interior back included).  Each count is a sum over the ranks.

    python examples/game_of_life.py                   # 4 simulated ranks in this process
    python examples/game_of_life.py --ranks 3 --boundary dead
    mpiexec -n 2 python examples/game_of_life.py
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, Sequence

import numpy as np

import dtensor_np as dt
from examples_common import compare, mesh_and_args

SHIFTS = [(i, j) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0)]

GLIDER = np.array([[0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype=np.uint8)


def step_torus(Z: Any) -> None:
    """One generation of ``Z`` (0 or 1 each cell) in place, the board wrapped around (a torus)."""
    N = sum(np.roll(Z, shift, axis=(0, 1)) for shift in SHIFTS)
    birth = (N == 3) & (Z == 0)
    survive = ((N == 2) | (N == 3)) & (Z == 1)
    Z[...] = 0
    Z[birth | survive] = 1


def step_framed(Z: Any) -> None:
    """One generation of the interior of ``Z`` in place, its frame of dead cells kept (Rougier's ``iterate``)."""
    N = (Z[0:-2, 0:-2] + Z[0:-2, 1:-1] + Z[0:-2, 2:] +
         Z[1:-1, 0:-2] + Z[1:-1, 2:] +
         Z[2:, 0:-2] + Z[2:, 1:-1] + Z[2:, 2:])
    birth = (N == 3) & (Z[1:-1, 1:-1] == 0)
    survive = ((N == 2) | (N == 3)) & (Z[1:-1, 1:-1] == 1)
    Z[...] = 0
    Z[1:-1, 1:-1][birth | survive] = 1


def life(board: Any, generations: int, boundary: str = "wrap",
         on_step: Optional[Callable[..., None]] = None) -> Any:
    """The board after ``generations`` (``boundary`` "wrap": a torus; "dead": dead cells all around).

    ``on_step(n, board, population, changed)`` sees every generation.
    """
    Z = np.copy(board) if boundary == "wrap" else np.pad(board, 1)
    step = step_torus if boundary == "wrap" else step_framed
    for n in range(generations):
        previous = np.copy(Z)
        step(Z)
        if on_step is not None:
            on_step(n, Z if boundary == "wrap" else Z[1:-1, 1:-1], np.count_nonzero(Z),
                    np.count_nonzero(Z != previous))
    return Z if boundary == "wrap" else Z[1:-1, 1:-1]


def start_board(rows: int = 21, cols: int = 17, seed: int = 0) -> np.ndarray:
    """A random soup in the lower part of the board and a glider in its upper left corner."""
    rng = np.random.default_rng(seed)
    board = np.zeros((rows, cols), dtype=np.uint8)
    board[1:4, 1:4] = GLIDER
    board[rows // 2:, cols // 3:] = rng.random((rows - rows // 2, cols - cols // 3)) < 0.35
    return board


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--boundary", choices=("wrap", "dead"), default="wrap",
                        help="wrap: a torus; dead: dead cells all around")
    mesh, args = mesh_and_args(parser, argv)
    board = start_board()
    reference: list = []
    final_np = life(board, args.generations, args.boundary,
                    on_step=lambda n, Z, population, changed: reference.append((np.copy(Z), population, changed)))

    def report(n: int, Z: Any, population: Any, changed: Any) -> None:
        expected, population_np, changed_np = reference[n]
        same = bool(np.array_equal(Z.full_tensor(), expected))
        print(f"generation {n:3d}: {int(population):3d} alive, {int(changed):3d} changed "
              f"(NumPy {population_np}, {changed_np}); board equal to NumPy's: {same}", flush=True)
        assert same and int(population) == population_np and int(changed) == changed_np

    final = life(dt.distribute_tensor(board, mesh, [dt.Shard(0)]), args.generations, args.boundary, on_step=report)
    print(dt.visualize_sharding(final), flush=True)
    print(compare(f"board after {args.generations} generations", final, final_np, rtol=0, atol=0), flush=True)


if __name__ == "__main__":
    main()
