"""Interleaved, slowest-rank timing shared by the benchmarks in this folder.

The loop needs a barrier and an in-place elementwise MAX across ranks; :func:`timed` takes
them from an mpi4py communicator, :func:`timed_with` from anything (``torch_redistribute.py``
passes ``torch.distributed``'s).  Nothing here imports mpi4py at module level.

Example (under ``mpiexec``; every rank runs the same calls)::

    from timing import timed
    times = timed([dtensor_side, raw_side], 1000, MPI.COMM_WORLD)
    dtensor_us, raw_us = np.median(times, axis=1) * 1e6
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

Runner = Callable[[], Any]


def timed_with(fns: list[Runner], iters: int, barrier: Runner, to_slowest: Callable[[np.ndarray], Any],
               clock: Callable[[], float] = time.perf_counter) -> np.ndarray:
    """Per-iteration seconds of each fn on the slowest rank, interleaved; shape ``(len(fns), iters)``.

    An iteration of one fn is ``barrier()``, start the clock, call it, stop the clock; the fns take
    turns, in an order that rotates by one from one iteration to the next, so every fn runs in
    every position (first, second, ...) equally often; with two fns each runs right after the
    other and right after itself equally often.  ``to_slowest(times)`` runs once
    after the loop and must replace every entry by its maximum over the ranks, in place.  ``clock``:
    ``time.process_time`` times this process's CPU (user and system) alone, steadier than the wall
    clock on a machine other jobs share.
    """
    n = len(fns)
    times = np.empty((n, iters))
    orders = [[(start + j) % n for j in range(n)] for start in range(n)]
    for i in range(iters):
        for j in orders[i % n]:
            fn = fns[j]
            barrier()
            t0 = clock()
            fn()
            times[j, i] = clock() - t0
    to_slowest(times)
    return times


def timed(fns: list[Runner], iters: int, comm: Any) -> np.ndarray:
    """:func:`timed_with` over an mpi4py communicator (``Barrier`` and ``Allreduce(IN_PLACE, MAX)``)."""
    from mpi4py import MPI

    return timed_with(fns, iters, comm.Barrier, lambda times: comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX))


def choose_iters(measure: Callable[[int], np.ndarray], budget_s: float, min_iters: int, max_iters: int,
                 per_call_s: float) -> int:
    """Warm up, then a count of iterations whose calls fill about ``budget_s`` (the same on every rank).

    ``measure(n)`` times ``n`` iterations of all the fns (as :func:`timed` does); ``per_call_s`` is
    what each call costs beyond its own time (the barrier and the clock), counted into the budget.
    """
    probe = measure(3)
    per_iter = float(np.median(probe, axis=1).sum())
    warm = int(min(max(0.15 * budget_s / max(per_iter, 1e-7), 3), 200))
    probe = measure(warm)
    per_iter = float(np.median(probe, axis=1).sum()) + per_call_s * probe.shape[0]
    iters = int(budget_s / max(per_iter, 1e-7))
    return max(min_iters, min(max_iters, iters))


def pooled_rounds(rounds: int, new_round: Callable[[], tuple[list[Runner], Any]],
                  measure: Callable[[list[Runner], int], np.ndarray], budget_s: float, min_iters: int,
                  max_iters: int, per_call_s: float) -> tuple[np.ndarray, int]:
    """Time ``rounds`` rounds of fns, each round's from ``new_round()``, and pool their iterations.

    ``new_round()`` returns the round's fns and whatever must stay alive until the end (its
    buffers), so every round runs on new ones.  The first round picks the count per round
    (:func:`choose_iters`, split over the rounds, at least ``min_iters`` in all); later rounds
    warm their new buffers first.  Returns the pooled times ``(len(fns), total)`` and the total.
    """
    kept: list[Any] = []
    per_round: list[np.ndarray] = []
    iters = 0
    for r in range(rounds):
        fns, keep = new_round()
        kept.append(keep)
        if r == 0:
            n = choose_iters(lambda m: measure(fns, m), budget_s, min_iters, max_iters, per_call_s)
            iters = max(-(-min_iters // rounds), n // rounds)  # min_iters <= iters * rounds <= max_iters
        else:
            measure(fns, max(3, iters // 20))  # warm the new buffers
        per_round.append(measure(fns, iters))
    return np.concatenate(per_round, axis=1), iters * rounds
