"""Interleaved, slowest-rank timing shared by the benchmarks in this folder.

Example (under ``mpiexec``; every rank runs the same calls)::

    from timing import timed
    times = timed([dtensor_side, raw_side], 1000, MPI.COMM_WORLD)
    dtensor_us, raw_us = np.median(times, axis=1) * 1e6
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
from mpi4py import MPI


def timed(fns: list[Callable[[], Any]], iters: int, comm: MPI.Intracomm) -> np.ndarray:
    """Per-iteration seconds of each fn on the slowest rank, interleaved; shape ``(len(fns), iters)``.

    An iteration of one fn is ``Barrier``, start the clock, call it, stop the clock; the fns take
    turns, in an order that rotates by one from one iteration to the next, so every fn runs in
    every position (first, after each other fn) equally often.  One ``Allreduce(MAX)`` after the
    loop makes every entry the slowest rank's time.
    """
    n = len(fns)
    times = np.empty((n, iters))
    orders = [[(start + j) % n for j in range(n)] for start in range(n)]
    clock = time.perf_counter
    barrier = comm.Barrier
    for i in range(iters):
        for j in orders[i % n]:
            fn = fns[j]
            barrier()
            t0 = clock()
            fn()
            times[j, i] = clock() - t0
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    return times
