"""Assertions for tests of distributed code: compare blocks where they live, fail on every rank together.

* :func:`assert_dtensor_equal` compares each rank's block of a DTensor with
  the matching slice of a NumPy array (no gather), then one small collective
  (``gather_descriptors``) tells every rank which ranks differ, where and by
  what, so every rank raises the same ``AssertionError``;
* :func:`check_op` runs a function on NumPy arrays and on DTensors of every
  combination of placements of its array arguments, and reports every failing
  combination at once;
* :func:`raises_on_all_ranks` passes only when every rank raised the
  exception (under MPI one small collective at exit says which did not).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> from dtensor_np.testing import assert_dtensor_equal, check_op, raises_on_all_ranks
    >>> mesh = dt.DeviceMesh((4,))
    >>> a = np.arange(10.0).reshape(5, 2)
    >>> assert_dtensor_equal(dt.distribute_tensor(a, mesh, [dt.Shard(0)]), a)
    >>> check_op(np.negative, a, mesh=mesh)   # the number of placement combinations checked
    3
    >>> with raises_on_all_ranks(dt.ShardingError, match="out of range"):
    ...     dt.distribute_tensor(a, mesh, [dt.Shard(2)])
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Optional, Union

import numpy as np

import collectives

from .dtensor import DTensor, distribute_tensor
from .errors import ShardingError
from .mesh import DeviceMesh
from .placements import Placement, Replicate, Shard
from .runtime import backend_for

__all__ = ["assert_dtensor_equal", "check_op", "raises_on_all_ranks", "placement_combinations"]

_MAX_DESCRIPTOR = 16  # collectives.gather_descriptors: at most 16 ints per rank
_SAME, _DIFFER, _SHAPE = 0, 1, 2


def _host(block: Any) -> np.ndarray:
    """A block as a NumPy array (a CuPy block is copied to the host)."""
    get = getattr(block, "get", None)
    return np.asarray(get() if get is not None and not isinstance(block, np.ndarray) else block)


def _bits(value: Any) -> int:
    """A scalar as the int64 bits of a float64 (NaN where it is not a real number), to travel as an int."""
    try:
        number = float(np.real(value))
    except (TypeError, ValueError):
        number = float("nan")
    return int(np.float64(number).view(np.int64))


def _float(bits: int) -> float:
    return float(np.int64(bits).view(np.float64))


def _differs(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    if got.dtype.kind in "biufc" and want.dtype.kind in "biufc":
        return ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return np.asarray(got != want, bool).reshape(got.shape)


def _descriptor(block: Any, want: np.ndarray, offset: Sequence[int], rtol: float, atol: float) -> tuple[int, ...]:
    """``(status, count, *global index, got bits, expected bits)`` for one rank's block (``(0,)`` when it matches)."""
    got = _host(block)
    if got.shape != want.shape:
        return (_SHAPE, *got.shape)[:_MAX_DESCRIPTOR]
    bad = _differs(got, want, rtol, atol)
    count = int(bad.sum())
    if count == 0:
        return (_SAME,)
    local = tuple(int(i) for i in np.argwhere(bad)[0])
    if 4 + len(local) > _MAX_DESCRIPTOR:  # too many dims to say where: the count only
        return (_DIFFER, count)
    index = tuple(o + i for o, i in zip(offset, local))
    return (_DIFFER, count, *index, _bits(got[local]), _bits(want[local]))


def _explain(rank: int, desc: tuple[int, ...], shape: tuple[int, ...], offset: tuple[int, ...]) -> str:
    where = f"rank {rank}: block of shape {shape} at global offset {offset}"
    if desc[0] == _SHAPE:
        return f"{where}: expected a local block of shape {shape}, got {tuple(desc[1:])}"
    count = desc[1]
    if len(desc) == 2:
        return f"{where}: {count} of {int(np.prod(shape))} elements differ"
    index, got, want = tuple(desc[2:-2]), _float(desc[-2]), _float(desc[-1])
    return (f"{where}: {count} of {int(np.prod(shape))} elements differ, the first at global index {index}: "
            f"got {got!r}, expected {want!r}")


def assert_dtensor_equal(
    x: DTensor,
    expected: Any,
    *,
    rtol: float = 1e-7,
    atol: float = 0.0,
    placements: Optional[Sequence[Placement]] = None,
) -> None:
    """Assert that ``x`` equals the NumPy array ``expected`` (as ``np.allclose``), without gathering ``x``.

    Each rank compares its own block with the slice of ``expected`` at the
    block's global offset (every rank passes the same ``expected``); then one
    small collective agrees on the verdict, so every rank raises the same
    ``AssertionError`` together, naming each failing rank, its block's global
    offset, the first differing global index and both values.  A ``Partial``
    placement is reduced first (its blocks are not slices of the array).
    ``placements=`` also asserts ``x.placements``.  NaNs compare equal.

    Raises:
        TypeError: ``x`` is not a DTensor.
        AssertionError: the shape, the placements or a value differ.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> a = np.arange(6.0)
        >>> x = dt.distribute_tensor(a, dt.DeviceMesh((4,)), [dt.Shard(0)])
        >>> assert_dtensor_equal(x, a, placements=[dt.Shard(0)])
        >>> b = a.copy(); b[4] = -1.0
        >>> assert_dtensor_equal(x, b)
        Traceback (most recent call last):
        ...
        AssertionError: assert_dtensor_equal: 1 of 4 ranks differ from expected (rtol=1e-07, atol=0.0):
          rank 2: block of shape (2,) at global offset (4,): 1 of 2 elements differ, the first at global index (4,): got 4.0, expected -1.0
    """
    if not isinstance(x, DTensor):
        raise TypeError(f"assert_dtensor_equal: expected a DTensor as x, got {type(x).__name__}")
    want = _host(expected)
    if placements is not None and tuple(placements) != tuple(x.placements):
        raise AssertionError(
            f"assert_dtensor_equal: expected placements {tuple(placements)}, got {tuple(x.placements)}"
        )
    if tuple(x.shape) != want.shape:
        raise AssertionError(f"assert_dtensor_equal: expected shape {want.shape}, got {tuple(x.shape)}")
    if any(p.is_partial() for p in x.placements):
        x = x.redistribute([Replicate() if p.is_partial() else p for p in x.placements])
    spec = x.spec
    mine = {}
    for rank, block in x.shards.items():
        shape, offset = spec.local_block(rank)
        window = tuple(slice(o, o + n) for o, n in zip(offset, shape))
        mine[rank] = _descriptor(block, want[window], offset, rtol, atol)
    everyone = backend_for(x.mesh).gather_descriptors(mine)
    failed = [(r, d) for r, d in sorted(everyone.items()) if d[0] != _SAME]
    if failed:
        lines = [_explain(r, d, *spec.local_block(r)) for r, d in failed]
        raise AssertionError(
            f"assert_dtensor_equal: {len(failed)} of {len(everyone)} ranks differ from expected "
            f"(rtol={rtol}, atol={atol}):\n  " + "\n  ".join(lines)
        )


def placement_combinations(mesh: DeviceMesh, ndim: int) -> list[tuple[Placement, ...]]:
    """Every placement of an ``ndim``-d array on ``mesh``: ``Replicate`` or ``Shard(d)`` on each mesh dim.

    Example:
        >>> import dtensor_np as dt
        >>> [''.join(map(str, c)) for c in placement_combinations(dt.DeviceMesh((2,)), 2)]
        ['R', 'S(0)', 'S(1)']
    """
    choices = [Replicate()] + [Shard(d) for d in range(ndim)]
    return list(itertools.product(choices, repeat=mesh.ndim))


def _label(placements: Sequence[Placement]) -> str:
    return "[" + ", ".join(map(str, placements)) + "]"


def _compare(result: Any, expected: Any, rtol: float, atol: float) -> None:
    if isinstance(expected, (tuple, list)):
        if not isinstance(result, (tuple, list)) or len(result) != len(expected):
            raise AssertionError(f"expected a sequence of {len(expected)} results, got {type(result).__name__}")
        for r, e in zip(result, expected):
            _compare(r, e, rtol, atol)
    elif isinstance(result, DTensor):
        assert_dtensor_equal(result, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(_host(result), _host(expected), rtol=rtol, atol=atol, equal_nan=True)


def check_op(
    fn: Callable[..., Any],
    *numpy_args: Any,
    placements: Union[str, Iterable[Sequence[Sequence[Placement]]]] = "all",
    mesh: Optional[DeviceMesh] = None,
    rtol: float = 1e-7,
    atol: float = 0.0,
) -> int:
    """Check that ``fn`` on DTensors equals ``fn`` on NumPy arrays, for every combination of placements.

    ``fn(*numpy_args)`` is the reference; then every NumPy array argument is
    distributed on ``mesh`` (default: a simulated 2 x 2 mesh) and ``fn`` runs on
    the DTensors, its results compared with :func:`assert_dtensor_equal`.
    ``placements="all"`` tries every combination (``Replicate`` or ``Shard`` on
    each dim, per mesh dim, per array argument: arrays whose dims do not divide
    the mesh give uneven and empty shards); or pass the combinations to try,
    each one placements sequence per array argument.  Other arguments (scalars,
    axes) are passed as they are.  Every failing combination is reported in one
    ``AssertionError``; returns the number of combinations checked.

    Raises:
        TypeError: ``fn`` is not callable.
        ShardingError: ``placements`` is neither ``"all"`` nor combinations of one entry per array argument.
        AssertionError: a combination raised or gave a different result.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> a, b = np.ones((3, 2)), np.arange(2.0)
        >>> check_op(np.add, a, b, mesh=dt.DeviceMesh((2,)))
        6
        >>> check_op(np.add, a, b, mesh=dt.DeviceMesh((2,)), placements=[([dt.Shard(0)], [dt.Replicate()])])
        1
    """
    if not callable(fn):
        raise TypeError(f"check_op: expected a callable fn, got {type(fn).__name__}")
    mesh = DeviceMesh((2, 2)) if mesh is None else mesh
    arrays = [i for i, a in enumerate(numpy_args) if isinstance(a, np.ndarray)]
    if isinstance(placements, str):
        if placements != "all":
            raise ShardingError(f"check_op: expected placements='all' or a list of combinations, got {placements!r}")
        combos = list(itertools.product(*(placement_combinations(mesh, numpy_args[i].ndim) for i in arrays)))
    else:
        combos = [tuple(tuple(p) for p in combo) for combo in placements]
        wrong = [c for c in combos if len(c) != len(arrays)]
        if wrong:
            raise ShardingError(
                f"check_op: expected one placements sequence per array argument ({len(arrays)}) in each "
                f"combination, got {len(wrong[0])} in {wrong[0]!r}"
            )
    expected = fn(*numpy_args)
    failures = []
    for combo in combos:
        args = list(numpy_args)
        for i, p in zip(arrays, combo):
            args[i] = distribute_tensor(numpy_args[i], mesh, p)
        try:
            _compare(fn(*args), expected, rtol, atol)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, with its kind
            failures.append(f"{' '.join(map(_label, combo))}: {type(exc).__name__}: {exc}")
    if failures:
        name = getattr(fn, "__name__", repr(fn))
        raise AssertionError(
            f"check_op({name}): {len(failures)} of {len(combos)} placement combinations failed on mesh "
            f"{mesh.shape}:\n" + "\n".join(failures)
        )
    return len(combos)


class raises_on_all_ranks:  # noqa: N801 - a context manager named as a function, like pytest.raises
    """A context manager that passes only when every rank raised ``exc_type`` (matching ``match``, a regex).

    Simulated ranks live in this one process, so one raise is every rank's.
    Under ``mpiexec`` one small collective at the end of the block tells
    every rank which ranks did not raise it (or raised something else), and
    every rank fails together.  ``.value`` is the exception caught.

    Raises:
        TypeError: ``exc_type`` is not an exception class.
        AssertionError: some rank did not raise ``exc_type`` or its message did not match.

    Example:
        >>> with raises_on_all_ranks(ValueError, match="bad") as caught:
        ...     raise ValueError("a bad value")
        >>> str(caught.value)
        'a bad value'
        >>> with raises_on_all_ranks(ValueError):
        ...     pass
        Traceback (most recent call last):
        ...
        AssertionError: raises_on_all_ranks: expected ValueError on every rank; rank 0 did not raise
    """

    def __init__(self, exc_type: type[BaseException], match: Optional[str] = None) -> None:
        if not (isinstance(exc_type, type) and issubclass(exc_type, BaseException)):
            raise TypeError(f"raises_on_all_ranks: expected an exception class, got {exc_type!r}")
        self.exc_type = exc_type
        self.match = match
        self.value: Optional[BaseException] = None

    def __enter__(self) -> "raises_on_all_ranks":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], value: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool:
        if value is None:
            status = 0  # did not raise
        elif not isinstance(value, self.exc_type):
            status = 2  # raised something else
        elif self.match is not None and not re.search(self.match, str(value)):
            status = 3  # the message does not match
        else:
            status = 1
        if collectives.launched_by_mpiexec() and (collectives.mpi_world_size() or 1) > 1:
            backend = collectives.get_backend("mpi")
            rank = backend.rank
            everyone = backend.gather_descriptors({rank: (status,)})
        else:
            rank, everyone = 0, {0: (status,)}
        bad = {r: d[0] for r, d in sorted(everyone.items()) if d[0] != 1}
        if not bad:
            self.value = value
            return True
        what = {0: "did not raise", 2: "raised another exception", 3: f"raised it with a message not matching {self.match!r}"}
        lines = [f"rank {r} {what[s]}" + (f" ({type(value).__name__}: {value})" if r == rank and value is not None else "")
                 for r, s in bad.items()]
        raise AssertionError(
            f"raises_on_all_ranks: expected {self.exc_type.__name__} on every rank; " + "; ".join(lines)
        ) from value
