"""Shared helpers for the collectives tests: meshes, data, and failing on every rank together.

Every rank builds the full data from a seed, so under MPI each process can
compute what NumPy gives on the full data and compare its own result.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None

DTYPES: tuple[Any, ...] = (
    np.float32, np.float64, np.int64, np.int32, np.bool_, np.complex64, np.float16,
)
BFLOAT16 = None if ml_dtypes is None else np.dtype(ml_dtypes.bfloat16)

UFUNCS = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum}


def mesh_groups(mesh_shape: tuple[int, ...], dim: int) -> tuple[tuple[int, ...], ...]:
    """The groups along ``dim`` of a row-major device mesh, e.g. (2, 2) dim 0 -> ((0, 2), (1, 3))."""
    ids = np.arange(math.prod(mesh_shape)).reshape(mesh_shape)
    rows = np.moveaxis(ids, dim, -1).reshape(-1, mesh_shape[dim])
    return tuple(tuple(int(r) for r in row) for row in rows)


def partitions(world_size: int) -> list[tuple[tuple[int, ...], ...]]:
    """Groups to test on: whole world, reversed, singletons, every dim of 2-D/3-D meshes, uneven."""
    n = world_size
    found = [(tuple(range(n)),)]
    if n > 1:
        found += [(tuple(reversed(range(n))),), tuple((r,) for r in range(n))]
    meshes = {4: [(2, 2)], 8: [(2, 2, 2), (2, 4)]}.get(n, [])
    for mesh in meshes:
        found += [mesh_groups(mesh, dim) for dim in range(len(mesh))]
    if n == 3:
        found.append(((0, 2), (1,)))
    if n == 4:
        found.append(((3,), (2, 0, 1)))
    return list(dict.fromkeys(found))


def group_of(groups: tuple[tuple[int, ...], ...], rank: int) -> tuple[int, ...]:
    return next(g for g in groups if rank in g)


def make_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Small integer values (exact in every dtype, so sums are exact in any order)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    values = rng.integers(-8, 9, size=shape)
    if dtype.kind == "c":
        return (values + 1j * rng.integers(-8, 9, size=shape)).astype(dtype)
    if dtype.kind == "u":
        values = np.abs(values)
    return values.astype(dtype)


def non_contiguous(x: np.ndarray) -> np.ndarray:
    """The same values as ``x`` in a non-contiguous (strided) array."""
    if x.ndim == 0:
        return x
    holder = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    view = holder[..., ::2]
    view[...] = x
    return view


def reduce_in_group_order(arrays: Iterable[np.ndarray], op: str) -> np.ndarray:
    """What NumPy computes for ``op`` over the members in group order."""
    arrays = list(arrays)
    result = functools.reduce(UFUNCS[op], arrays)
    if op == "avg":
        result = result / len(arrays)
    return np.asarray(result)


def torch_chunks(length: int, pieces: int) -> list[int]:
    """torch.chunk sizes written out independently of the code under test."""
    step = math.ceil(length / pieces) if pieces else 0
    return [max(0, min(step, length - i * step)) for i in range(pieces)]


def split_along(x: np.ndarray, axis: int, sizes: Iterable[int]) -> list[np.ndarray]:
    bounds = np.cumsum([0, *sizes])
    index = [slice(None)] * x.ndim
    pieces = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(start), int(stop))
        pieces.append(x[tuple(index)])
    return pieces


class Failures:
    """Collects mismatches on this process; ``raise_if_any`` fails every rank together.

    Under MPI a failing assertion on one rank must not leave the others
    waiting in the next collective, so checks record instead of raising and
    the verdict is agreed with one ``all_true`` at the end.
    """

    def __init__(self, world: Any) -> None:
        self.world = world
        self.messages: list[str] = []

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            self.messages.append(message)

    def equal(self, actual: Any, expected: np.ndarray, context: str, contiguous: bool = True) -> None:
        """``actual`` is a new (C-contiguous unless ``contiguous=False``) ndarray equal to ``expected``
        (same shape and dtype)."""
        try:
            assert isinstance(actual, np.ndarray), f"expected an ndarray, got {type(actual)}"
            np.testing.assert_array_equal(actual, expected, strict=True)
            assert actual.flags.c_contiguous or not contiguous, "result is not C-contiguous"
        except AssertionError as exc:
            self.messages.append(f"{context}: {exc}")

    def close(self, actual: Any, expected: np.ndarray, context: str, rtol: float) -> None:
        try:
            assert actual.shape == expected.shape and actual.dtype == expected.dtype
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0)
        except AssertionError as exc:
            self.messages.append(f"{context}: {exc}")

    def raises(
        self, call: Callable[[], Any], error: type[BaseException], match: str, context: str
    ) -> None:
        """``call()`` raises ``error`` whose message contains ``match`` (on this rank)."""
        try:
            call()
        except error as exc:
            if match not in str(exc):
                self.messages.append(f"{context}: message {str(exc)!r} lacks {match!r}")
        except Exception as exc:  # noqa: BLE001 - reported as a failure
            self.messages.append(f"{context}: expected {error.__name__}, got {exc!r}")
        else:
            self.messages.append(f"{context}: expected {error.__name__}, nothing raised")

    def raise_if_any(self) -> None:
        everyone_ok = self.world.backend.all_true({r: not self.messages for r in self.world.ranks})
        shown = "\n".join(self.messages[:8])
        more = f"\n... and {len(self.messages) - 8} more" if len(self.messages) > 8 else ""
        assert everyone_ok and not self.messages, shown + more or "another rank reported failures"


def held(world: Any, per_rank: Mapping[int, Any]) -> dict[int, Any]:
    """The entries of ``per_rank`` for the ranks this process holds."""
    return {r: per_rank[r] for r in world.ranks}


def unchanged(failures: Failures, inputs: Mapping[int, np.ndarray], copies: Mapping[int, np.ndarray], context: str) -> None:
    for rank, copy in copies.items():
        failures.expect(
            np.array_equal(inputs[rank], copy, equal_nan=inputs[rank].dtype.kind in "fc"),
            f"{context}: the caller's array of rank {rank} was modified",
        )


def independent(failures: Failures, results: Mapping[int, np.ndarray], inputs: Mapping[int, np.ndarray], context: str) -> None:
    """No result shares memory with another result or with any input."""
    ranks = list(results)
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            failures.expect(
                not np.shares_memory(results[a], results[b]),
                f"{context}: results of ranks {a} and {b} share memory",
            )
        for rank, x in inputs.items():
            failures.expect(
                not np.shares_memory(results[a], x),
                f"{context}: result of rank {a} shares memory with the input of rank {rank}",
            )
