"""Limit benchmark: each DTensor call against its floor, NumPy's kernel on this rank's block plus the raw collective.

Run (2 ranks; any world size works, the default shapes are for 2)::

    mpiexec -n 2 python benchmarks/limits.py --json OUT.json         # every op (one to two minutes)
    mpiexec -n 2 python benchmarks/limits.py --quick                 # small shapes, a short budget
    mpiexec -n 2 python benchmarks/limits.py --ops qr,svd,"x.T @ x"  # some ops only
    mpiexec -n 2 python benchmarks/limits.py --ops qr --profile prof/   # + a pyinstrument report per row
    mpiexec -n 2 python benchmarks/limits.py --agreement both        # each row with the default SPMD agreement
                                                                     # (collectives.spmd) on, then off

Every rank runs one BLAS thread (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and
``MKL_NUM_THREADS`` are set to 1 before NumPy is imported), float64 throughout.
The inputs are row-sharded (``Shard(0)`` on a 1-D mesh of the whole world):
``A`` 16384x64 (``b`` a 16384 vector for lstsq) for the tall-skinny
factorisations, ``x`` 4096x1024 for the moments, argmax and sums, and ``x``
4096x1024 times a replicated ``w`` 1024x256 for matmul.

A row times the DTensor call as a user writes it (``np.linalg.qr(A)``,
``np.var(x, axis=0)``, ``x @ w``, ...) against its FLOOR in the same run: what a
hand-written mpi4py program that returns the same result with the same
placement must at least do, i.e. NumPy's kernel on this rank's block plus the
raw buffer collective of the bytes the result needs, into buffers allocated
before the loop:

==========================  =====================================================================
op                          floor (what is timed)
==========================  =====================================================================
qr (TSQR)                   ``np.linalg.qr(block)``, ``Allgather`` of the d x d R factors, ``np.linalg.qr``
                            of the stacked (p*d) x d factors (every rank), ``Q = Q1 @ Q2[this rank's d rows]``:
                            Q row-sharded, R replicated
svd (TSQR)                  the same local QR and ``Allgather``, ``np.linalg.svd`` of the stack,
                            ``U = Q1 @ U2[this rank's rows]``: U row-sharded, S and Vt replicated
lstsq (TSQR)                R of the block's ``[A_i | b_i]`` (``np.linalg.qr(mode="r")``: no Q formed),
                            ``Allgather`` of the (d+1) x (d+1) triangles, ``np.linalg.lstsq`` of the stack
                            (x, residuals, rank and singular values replicated)
var, std axis=None, 0       ``np.mean`` and ``np.var(mean=...)`` (or ``np.std``) of the block, ``Allgather`` of
                            the (mean, var) pairs, Chan's combination of the per-rank moments
var, std axis=1             ``np.var`` (``np.std``) of the block along rows: no communication
argmax axis=1               ``np.argmax(block, axis=1)``: no communication
argmax axis=0               ``np.argmax(block, axis=0)`` and the values there, ``Allgather`` of the (value,
                            global index) pairs, the first maximum over ranks
sum axis=1                  ``block.sum(axis=1)``: no communication
sum axis=0, None            ``block.sum(axis)``, ``Allreduce(SUM)`` of the result
x @ w                       ``block @ w``: no communication
x.T @ x                     ``block.T @ block``, ``Allreduce(SUM)`` of the d x d result
roll axis=0                 ``np.roll(x, 1, axis=0)`` of row-sharded x: ``Sendrecv`` of the block's last row
                            to the next rank (a halo), ``np.concatenate`` of the received row and the rest
==========================  =====================================================================

Where the DTensor call returns a ``Partial`` result (``np.sum(x, axis=0)``,
``x.T @ x``), what the user reads is the reduced value: the DTensor side is then
the call followed by ``.redistribute([Replicate()])`` (the ``out`` column says
``P(sum)->R``), the same work as its floor.  The row ``x.T @ x (Partial)`` times
the call alone against ``block.T @ block`` alone.

Timing (``timing.py``, as ``redistribute.py``): the two sides interleaved call
by call (a ``Barrier``, the clock, one call), the slowest rank's time per call,
``--rounds`` rounds pooled (each round with new floor buffers), the median.
Before timing, every row checks the DTensor result AND the floor's result
against NumPy on the full array, on every rank (QR and SVD up to the column
signs NumPy leaves open: ``Q @ R == A``, ``Q.T @ Q == I`` and ``|R|`` equal to
NumPy's; ``U * S @ Vt == A``, ``S`` and ``|Vt|`` equal to NumPy's); any
mismatch stops every rank with every rank's complaint.

``--json`` writes a list of rows ``{"op", "shape", "placement", "out", "ranks",
"dtensor_ms", "floor_ms", "ratio", "iters", "agreement"}`` (rank 0); ``ratio = dtensor_ms /
floor_ms``, target <= 1.2.
"""
from __future__ import annotations

import os

if __name__ == "__main__":  # run as the script (not imported by a test): one BLAS thread per rank, set before
    for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # NumPy starts its pool
        os.environ[_variable] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import importlib.util  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable, Optional, Sequence  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cli import add_agreement_option, agreement_modes, write_rows  # noqa: E402  (next to this script)
from timing import pooled_rounds, timed  # noqa: E402

import dtensor_np as dt  # noqa: E402
from collectives.spmd import default_agreement  # noqa: E402

Runner = Callable[[], Any]
# (this rank's blocks of the inputs, the communicator) -> the floor's call, returning its result
FloorFactory = Callable[[Sequence[np.ndarray], Any], Runner]

TALL, WIDE, WEIGHT = (16384, 64), (4096, 1024), (1024, 256)
QUICK_TALL, QUICK_WIDE, QUICK_WEIGHT = (512, 16), (256, 64), (64, 32)
TARGET = 1.2
VAR_TAKES_MEAN = np.lib.NumpyVersion(np.__version__) >= "2.0.0"  # np.var(mean=...): the mean is not computed twice


@dataclass(frozen=True)
class Case:
    """One row: the call (the same callable on DTensors and on NumPy arrays), its floor and how results compare.

    ``inputs`` names each input's kind (``"tall"``, ``"vector"``, ``"wide"``: row-sharded;
    ``"weight"``: replicated); ``floor_out`` has a letter per output of the floor: ``S`` row-sharded,
    ``R`` replicated, ``P`` a partial sum over the ranks; ``compare`` is ``"allclose"``, ``"qr"`` or
    ``"svd"``; ``reduce``: the DTensor side reduces a Partial result to Replicate (what the user reads).
    """

    op: str
    inputs: tuple[str, ...]
    call: Callable[..., Any]
    floor: FloorFactory
    floor_out: str
    compare: str = "allclose"
    reduce: bool = False

    def dtensor(self, *tensors: Any) -> Any:
        """The DTensor side as timed: the call, then Partial results reduced where ``reduce`` says so."""
        result = self.call(*tensors)
        return _replicated(result) if self.reduce else result


# ---- floors: NumPy's kernel on this rank's block plus the raw mpi4py collective -------------------

def _tsqr_floor(factor: Callable[[np.ndarray], Any]) -> FloorFactory:
    """TSQR: the block's QR, ``Allgather`` of the d x d R factors, ``factor(stack)`` on every rank.

    ``factor`` returns the (p*d) x d left factor first (Q2 or U2), then the replicated results; the
    row-sharded one is ``Q1 @`` this rank's d rows of the left factor.
    """
    def factory(blocks: Sequence[np.ndarray], comm: Any) -> Runner:
        block, = blocks
        d, rank = block.shape[1], comm.rank
        stack = np.empty((comm.size * d, d))

        def run() -> Any:
            q1, r1 = np.linalg.qr(block)
            comm.Allgather(r1, stack)
            left, *replicated = factor(stack)
            return (q1 @ left[rank * d:(rank + 1) * d], *replicated)
        return run
    return factory


def _lstsq_floor(blocks: Sequence[np.ndarray], comm: Any) -> Runner:
    """R of this rank's ``[A_i | b_i]`` (no Q formed), ``Allgather`` of the (d+1) x (d+1) triangles, lstsq of the stack.

    ``[A | b] = diag(Q_i) @ stack`` with orthonormal Q_i, so the stack's least-squares problem has the
    same solution, residual and singular values as the full one.
    """
    block, b = blocks
    d = block.shape[1]
    augmented = np.empty((block.shape[0], d + 1))
    stack = np.empty((comm.size * (d + 1), d + 1))

    def run() -> Any:
        augmented[:, :d] = block
        augmented[:, d] = b
        comm.Allgather(np.linalg.qr(augmented, mode="r"), stack)
        return np.linalg.lstsq(stack[:, :d], stack[:, d], rcond=None)
    return run


def _row_counts(comm: Any, rows: int) -> np.ndarray:
    """Every rank's row count (torch.chunk's split, as the library's)."""
    return np.array(comm.allgather(rows), dtype=np.float64)


def _moments_floor(axis: Optional[int], std: bool) -> FloorFactory:
    """var/std along ``axis``: the block's moments, one Allgather of (mean, var), Chan's combination."""
    def factory(blocks: Sequence[np.ndarray], comm: Any) -> Runner:
        block, = blocks
        kernel = np.std if std else np.var
        if axis == 1:
            return lambda: kernel(block, axis=1)
        width = block.shape[1] if axis == 0 else 1
        n = _row_counts(comm, block.shape[0]) * (1 if axis == 0 else block.shape[1])
        weights = (n / n.sum())[:, None]
        send, recv = np.empty((2, width)), np.empty((comm.size, 2, width))

        def run() -> Any:
            mean = np.mean(block, axis=axis, keepdims=True)
            send[0] = mean.ravel()
            send[1] = (np.var(block, axis=axis, mean=mean) if VAR_TAKES_MEAN else np.var(block, axis=axis)).ravel()
            comm.Allgather(send, recv)
            means, variances = recv[:, 0], recv[:, 1]
            total = (weights * means).sum(axis=0)
            var = (weights * (variances + (means - total) ** 2)).sum(axis=0)
            out = np.sqrt(var) if std else var
            return out if axis == 0 else out[0]
        return run
    return factory


def _argmax_floor(axis: int) -> FloorFactory:
    def factory(blocks: Sequence[np.ndarray], comm: Any) -> Runner:
        block, = blocks
        if axis == 1:
            return lambda: np.argmax(block, axis=1)
        cols = np.arange(block.shape[1])
        offset = float(sum(comm.allgather(block.shape[0])[:comm.rank]))
        send, recv = np.empty((2, block.shape[1])), np.empty((comm.size, 2, block.shape[1]))

        def run() -> Any:
            idx = np.argmax(block, axis=0)
            send[0] = block[idx, cols]
            np.add(idx, offset, out=send[1])
            comm.Allgather(send, recv)
            best = np.argmax(recv[:, 0], axis=0)  # the first maximum: the lowest rank, as NumPy's first index
            return recv[best, 1, cols].astype(np.int64)
        return run
    return factory


def _reduced_floor(local: Callable[..., np.ndarray]) -> FloorFactory:
    """``local(*blocks)``, then ``Allreduce(SUM)`` of it into a buffer allocated once."""
    def factory(blocks: Sequence[np.ndarray], comm: Any) -> Runner:
        from mpi4py import MPI

        out = np.empty_like(np.asarray(local(*blocks)))

        def run() -> Any:
            comm.Allreduce(np.asarray(local(*blocks)), out, MPI.SUM)
            return out
        return run
    return factory


def _halo_roll_floor(blocks: Sequence[np.ndarray], comm: Any) -> Runner:
    """``np.roll(x, 1, axis=0)`` by hand: each rank's last row to the next rank, then one copy of the block."""
    (x,) = blocks
    rank, size = comm.Get_rank(), comm.Get_size()
    last, received = np.ascontiguousarray(x[-1:]), np.empty_like(x[-1:])

    def run() -> Any:
        comm.Sendrecv(last, dest=(rank + 1) % size, recvbuf=received, source=(rank - 1) % size)
        return np.concatenate([received, x[:-1]])
    return run


def _local_floor(local: Callable[..., Any]) -> FloorFactory:
    return lambda blocks, comm: lambda: local(*blocks)


def _replicated(result: Any) -> Any:
    """``result`` with every Partial DTensor in it reduced to Replicate (what the user reads)."""
    if isinstance(result, tuple):
        return tuple(_replicated(r) for r in result)
    if isinstance(result, dt.DTensor) and any(p.is_partial() for p in result.placements):
        return result.redistribute([dt.Replicate()] * len(result.placements))
    return result


def _cases() -> list[Case]:
    def moments(fn: Callable[..., Any], axis: Optional[int]) -> Case:
        return Case(f"{fn.__name__} axis={axis}", ("wide",), lambda x: fn(x, axis=axis),
                    _moments_floor(axis, fn is np.std), "S" if axis == 1 else "R")

    def summed(axis: Optional[int]) -> Case:
        local = lambda x: x.sum(axis=axis)  # noqa: E731
        floor = _local_floor(local) if axis == 1 else _reduced_floor(local)
        return Case(f"sum axis={axis}", ("wide",), lambda x: np.sum(x, axis=axis), floor, "S" if axis == 1 else "R",
                    reduce=True)

    gram = lambda x: x.T @ x  # noqa: E731
    svd = functools.partial(np.linalg.svd, full_matrices=False)
    return [
        Case("qr", ("tall",), np.linalg.qr, _tsqr_floor(np.linalg.qr), "SR", "qr"),
        Case("svd", ("tall",), svd, _tsqr_floor(svd), "SRR", "svd"),
        Case("lstsq", ("tall", "vector"), lambda a, b: np.linalg.lstsq(a, b, rcond=None), _lstsq_floor,
             "RRRR"),
        *[moments(fn, axis) for fn in (np.var, np.std) for axis in (None, 0, 1)],
        Case("argmax axis=1", ("wide",), lambda x: np.argmax(x, axis=1), _argmax_floor(1), "S"),
        Case("argmax axis=0", ("wide",), lambda x: np.argmax(x, axis=0), _argmax_floor(0), "R"),
        *[summed(axis) for axis in (None, 0, 1)],
        Case("x @ w", ("wide", "weight"), lambda x, w: x @ w, _local_floor(lambda x, w: x @ w), "S"),
        Case("x.T @ x", ("wide",), gram, _reduced_floor(gram), "R", reduce=True),
        Case("x.T @ x (Partial)", ("wide",), gram, _local_floor(gram), "P"),
        Case("roll axis=0", ("wide",), lambda x: np.roll(x, 1, axis=0), _halo_roll_floor, "S"),
    ]


CASES = {case.op: case for case in _cases()}


# ---- checks ---------------------------------------------------------------------------------------

def _parts(result: Any) -> tuple[Any, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)


def _full(value: Any) -> np.ndarray:
    return value.full_tensor() if isinstance(value, dt.DTensor) else np.asarray(value)


def mismatch(case: Case, got: Sequence[np.ndarray], full_inputs: Sequence[np.ndarray]) -> Optional[str]:
    """What is wrong with ``got`` (full arrays) against NumPy's result on ``full_inputs``; None when it agrees."""
    want = _parts(case.call(*full_inputs))
    if len(got) != len(want):
        return f"expected {len(want)} results, got {len(got)}"
    if any(np.shape(g) != np.shape(w) for g, w in zip(got, want)):
        return f"expected shapes {[np.shape(w) for w in want]}, got {[np.shape(g) for g in got]}"
    close = lambda g, w: bool(np.allclose(g, w, rtol=1e-9, atol=1e-9))  # noqa: E731
    a = full_inputs[0]
    if case.compare == "qr":
        q, r = got
        ok = close(q @ r, a) and close(q.T @ q, np.eye(r.shape[0])) and close(np.abs(r), np.abs(want[1]))
    elif case.compare == "svd":
        u, s, vt = got
        ok = close((u * s) @ vt, a) and close(s, want[1]) and close(np.abs(vt), np.abs(want[2]))
    else:
        ok = all(np.array_equal(g, w) if np.asarray(w).dtype.kind in "iub" else close(g, w) for g, w in zip(got, want))
    return None if ok else "differs from NumPy on the full array"


def check_dtensor(case: Case, args: Sequence[Any], full_inputs: Sequence[np.ndarray]) -> Optional[str]:
    """The DTensor call's result against NumPy's (None when they agree); runs on a simulated mesh as well."""
    got = tuple(_full(p) for p in _parts(case.dtensor(*args)))
    return mismatch(case, got, full_inputs)


def check_floor(case: Case, floor: Runner, full_inputs: Sequence[np.ndarray], comm: Any) -> Optional[str]:
    """The floor's result (row-sharded outputs gathered, partial ones summed) against NumPy's."""
    got = []
    for part, kind in zip(_parts(floor()), case.floor_out):
        part = np.asarray(part)
        got.append(np.concatenate(comm.allgather(part)) if kind == "S" else sum(comm.allgather(part))
                   if kind == "P" else part)
    return mismatch(case, got, full_inputs)


def _stop_if_any(problems: dict[str, Optional[str]], comm: Any, op: str) -> None:
    """Every rank exits, naming every rank's complaint, when any rank found one."""
    complaints = [f"rank {r}: {side} {p}" for r, mine in enumerate(comm.allgather(problems))
                  for side, p in mine.items() if p]
    if complaints:  # every rank exits; rank 0 says why (every rank has the same list)
        raise SystemExit(f"{op}: " + "; ".join(complaints) if comm.rank == 0 else 1)


# ---- the run --------------------------------------------------------------------------------------

def shapes(quick: bool) -> dict[str, tuple[int, ...]]:
    """The global shape of each input kind."""
    tall, wide, weight = (QUICK_TALL, QUICK_WIDE, QUICK_WEIGHT) if quick else (TALL, WIDE, WEIGHT)
    return {"tall": tall, "vector": tall[:1], "wide": wide, "weight": weight}


def make_inputs(case: Case, mesh: Any, kinds: dict[str, tuple[int, ...]]) -> tuple[list[np.ndarray], list[Any]]:
    """The full arrays (the same on every rank: one seed) and their DTensors (weights replicated, others S(0))."""
    rng = np.random.default_rng(0)
    fulls = [rng.standard_normal(kinds[k]) for k in case.inputs]
    tensors = [dt.distribute_tensor(f, mesh, [dt.Replicate() if k == "weight" else dt.Shard(0)], src_data_rank=None)
               for f, k in zip(fulls, case.inputs)]
    return fulls, tensors


def _describe(case: Case, kinds: dict[str, tuple[int, ...]], sample: Any) -> tuple[str, str, str]:
    """(shape, input placement, output placement as the call returns it) of a row."""
    shape = " @ ".join("x".join(map(str, kinds[k])) for k in case.inputs if k != "vector")
    placement = ", ".join("R" if k == "weight" else "S(0)" for k in case.inputs)
    outs = []
    for part in _parts(sample):
        text = "".join(map(str, part.placements)) if isinstance(part, dt.DTensor) else type(part).__name__
        outs.append(text + ("->R" if case.reduce and "P(" in text else ""))
    return shape, placement, ",".join(outs)


def run_case(case: Case, mesh: Any, comm: Any, kinds: dict[str, tuple[int, ...]], budget_s: float,
             min_iters: int, max_iters: int, rounds: int, profile_dir: Optional[str], agree: bool) -> dict[str, Any]:
    """One row: check both sides against NumPy, then time them interleaved; medians in ms.

    ``agree`` only labels the row (and its profile): the caller sets the default agreement.
    """
    fulls, tensors = make_inputs(case, mesh, kinds)
    # both sides read the same memory: a block's speed depends on which pages it lies on (to_local() of
    # distribute_tensor's result, a view, took 2-4x as long in np.argmax(axis=1) as a copy of it, steadily)
    blocks = [np.array(t.to_local()) for t in tensors]
    tensors = [dt.DTensor.from_local(b, mesh, t.placements, shape=t.shape, run_check=False)
               for b, t in zip(blocks, tensors)]
    floor = case.floor(blocks, comm)
    _stop_if_any({"DTensor": check_dtensor(case, tensors, fulls), "floor": check_floor(case, floor, fulls, comm)},
                 comm, case.op)
    sample = case.call(*tensors)  # the call as the user writes it: its placements for the table

    def dtensor() -> Any:
        return case.dtensor(*tensors)

    def new_round() -> tuple[list[Runner], Any]:
        fresh = case.floor(blocks, comm)  # new floor buffers every round
        return [dtensor, fresh], fresh

    times, iters = pooled_rounds(rounds, new_round, lambda fns, n: timed(fns, n, comm), budget_s, min_iters,
                                 max_iters, 5e-6)
    dtensor_ms, floor_ms = (float(v) * 1e3 for v in np.median(times, axis=1))
    if profile_dir:
        from redistribute import profile_row  # pyinstrument on rank 0, one text report per row

        profile_row(case.op + ("" if agree else " no agreement"), dtensor, max(iters, 20), comm, profile_dir)
    shape, placement, out = _describe(case, kinds, sample)
    return {"op": case.op, "shape": shape, "placement": placement, "out": out, "ranks": comm.size,
            "dtensor_ms": round(dtensor_ms, 6), "floor_ms": round(floor_ms, 6),
            "ratio": round(dtensor_ms / floor_ms, 4), "iters": iters, "agreement": agree}


HEAD = (f"{'op':<18} {'shape':<21} {'placement':<10} {'out':<14} {'agree':<5} {'DTensor ms':>11} {'floor ms':>10} "
        f"{'ratio':>6}")


def table_line(row: dict[str, Any]) -> str:
    """A row of the printed table; ``*`` marks a ratio above the 1.2 target."""
    flag = " *" if row["ratio"] > TARGET else ""
    return (f"{row['op']:<18} {row['shape']:<21} {row['placement']:<10} {row['out']:<14} "
            f"{'on' if row['agreement'] else 'off':<5} {row['dtensor_ms']:>11.3f} {row['floor_ms']:>10.3f} "
            f"{row['ratio']:>6.2f}{flag}")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="OUT.json", help="write the rows as JSON (rank 0)")
    parser.add_argument("--quick", action="store_true", help="small shapes (512x16, 256x64, 64x32) and a short budget")
    parser.add_argument("--ops", help="comma-separated ops (default: all): " + "; ".join(CASES))
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of measuring per row, both sides (default 2; 0.02 with --quick)")
    parser.add_argument("--min-iters", type=int, default=None, help="at least this many calls (default 25; 3 quick)")
    parser.add_argument("--max-iters", type=int, default=2000, help="at most this many calls per side")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per row, each with new floor buffers, "
                        "pooled (default 3; 1 quick)")
    add_agreement_option(parser)
    parser.add_argument("--profile", metavar="DIR", help="after each row, profile the DTensor call with "
                        "pyinstrument (rank 0) and write a text report per row into DIR")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.ops.split(",")] if args.ops else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"expected ops among {list(CASES)}, got unknown {unknown}")
    if args.profile and importlib.util.find_spec("pyinstrument") is None:
        raise SystemExit("--profile needs pyinstrument: pip install -e '.[bench]'")
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mesh = dt.DeviceMesh((comm.size,), backend="mpi")
    kinds = shapes(args.quick)
    budget = args.budget if args.budget is not None else 0.02 if args.quick else 2.0
    min_iters = args.min_iters if args.min_iters is not None else 3 if args.quick else 25
    rounds = args.rounds if args.rounds is not None else 1 if args.quick else 3
    root = comm.rank == 0
    if root:
        print(f"{comm.size} ranks, float64, 1 BLAS thread a rank, NumPy {np.__version__}, "
              f"{platform.processor() or platform.machine()}; ratio = DTensor / floor, target <= {TARGET}", flush=True)
        print(HEAD + "\n" + "-" * len(HEAD), flush=True)
    rows = []
    for name, agree in ((name, agree) for name in names for agree in agreement_modes(args)):
        with default_agreement(agree):
            rows.append(run_case(CASES[name], mesh, comm, kinds, budget, min_iters, args.max_iters, rounds,
                                 args.profile, agree))
        if root:
            print(table_line(rows[-1]), flush=True)
    if root:
        write_rows(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
