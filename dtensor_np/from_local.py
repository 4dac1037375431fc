"""``DTensor.from_local``: wrap shards the ranks already hold, checked on every rank at once.

The check turns each rank's shard into a short row of ints (status, array
library, dtype, shape), shares the rows with one small collective, and then
every rank makes the same decision from the same rows: either all ranks go on,
or all raise, so one bad shard never leaves the others waiting in a collective.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .errors import ShardingError
from .int_tuple import as_ints
from .local_tensor import LocalTensor
from .mesh import DeviceMesh
from .placements import Placement, Shard
from .runtime import backend_for
from .spec import DTensorSpec, TensorMeta, _local_block

__all__ = ["build_from_local"]

MAX_NDIM = 8
_OK, _BAD_TYPE, _BAD_DTYPE, _BAD_NDIM, _MAPPING, _SUBCLASS = 0, 1, 2, 3, 4, 5
_LIBRARIES = {"numpy": 0, "cupy": 1}
_REASONS = {
    _BAD_TYPE: "is not a NumPy or CuPy array",
    _BAD_DTYPE: "has a dtype that cannot be distributed (object, string, void or datetime)",
    _BAD_NDIM: "has a different number of dims than the placements need",
    _MAPPING: "is a mapping of ranks; under MPI, from_local takes this rank's own array",
    _SUBCLASS: "is an ndarray subclass (a masked array or matrix), not a plain numpy.ndarray",
}
_TYPE_ERRORS = (_BAD_TYPE, _BAD_DTYPE, _MAPPING, _SUBCLASS)


def _dtype_code(dtype: np.dtype) -> int:
    return int.from_bytes(dtype.str.encode().ljust(8, b"\0")[:8], "little")


def _describe(x: Any, placements: Sequence[Placement]) -> tuple[list[int], Optional[Exception]]:
    """This shard's row of ints, and the local error it would raise (if any)."""
    from .dtensor import DTensor, array_library, check_array

    if isinstance(x, (DTensor, LocalTensor)) or not hasattr(x, "dtype") or not hasattr(x, "shape"):
        err: Exception = TypeError(f"from_local expects a NumPy or CuPy array for each shard, got {type(x).__name__}")
        return [_BAD_TYPE] + [0] * (3 + MAX_NDIM), err
    try:
        check_array(x, "local shard")
    except TypeError as e:
        return [_SUBCLASS if type(x) is not np.ndarray and isinstance(x, np.ndarray) else _BAD_DTYPE] + [0] * (3 + MAX_NDIM), e
    shard_dims = [p.dim for p in placements if isinstance(p, Shard)]
    ndim = x.ndim
    if ndim > MAX_NDIM or any(not -ndim <= d < ndim for d in shard_dims):
        err = ShardingError(
            f"a {ndim}-d local shard cannot take placements {[str(p) for p in placements]}"
            + (f" (at most {MAX_NDIM} dims)" if ndim > MAX_NDIM else "")
        )
        return [_BAD_NDIM] + [0] * (3 + MAX_NDIM), err
    row = [_OK, _LIBRARIES[array_library(x)], _dtype_code(x.dtype), ndim] + list(x.shape) + [0] * (MAX_NDIM - ndim)
    return row, None


def build_from_local(
    local: Any,
    mesh: DeviceMesh,
    placements: Sequence[Placement],
    shape: Optional[Sequence[int]],
    run_check: bool,
) -> Any:
    from .dtensor import DTensor

    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"from_local needs a DeviceMesh, got {type(mesh).__name__}")
    shape = None if shape is None else as_ints(shape, "from_local: shape")
    backend = backend_for(mesh)
    if mesh.backend == "mpi":
        shards = {backend.ranks[0]: local}
    else:
        if isinstance(local, LocalTensor):
            shards = local.shards
        elif isinstance(local, Mapping):
            shards = dict(local)
        else:
            raise TypeError(
                "in simulated mode, from_local takes {rank: array} for every rank or the LocalTensor "
                f"that to_local() returns, got {type(local).__name__}"
            )
        if set(shards) != set(backend.ranks):
            raise ShardingError(f"expected shards for ranks {list(backend.ranks)}, got ranks {sorted(shards)}")
    spec0 = DTensorSpec(mesh, tuple(placements) if isinstance(placements, (list, tuple)) else placements)

    rows: dict[int, list[int]] = {}
    errors: dict[int, Exception] = {}
    for r, x in shards.items():
        if mesh.backend == "mpi" and isinstance(x, (Mapping, LocalTensor)):
            rows[r] = [_MAPPING] + [0] * (3 + MAX_NDIM)
            errors[r] = TypeError("under MPI, from_local takes this rank's own array, not a mapping of ranks")
            continue
        rows[r], err = _describe(x, spec0.placements)
        if err is not None:
            errors[r] = err
    table = backend.gather_descriptors(rows) if run_check else rows
    table = {r: tuple(v) for r, v in table.items()}

    bad = {r: row[0] for r, row in table.items() if row[0] != _OK}
    if bad:
        detail = "; ".join(f"rank {r}'s shard {_REASONS[c]}" for r, c in sorted(bad.items()))
        mine = [r for r in sorted(errors)]
        if mine:
            detail += f" ({errors[mine[0]]})"
        kind = TypeError if bad[min(bad)] in _TYPE_ERRORS else ShardingError
        raise kind(f"from_local: {detail}; placements {[str(p) for p in spec0.placements]}")

    first = table[min(table)]
    ndim = first[3]
    dtype = next(iter(shards.values())).dtype
    mismatch = [r for r, row in table.items() if row[1:4] != first[1:4]]
    if mismatch:
        raise ShardingError("from_local: the ranks' shards disagree on array library, dtype or ndim: " + _rows_text(table))
    spec = DTensorSpec(mesh, spec0.placements, TensorMeta((0,) * ndim, dtype))
    if shape is None:
        if run_check or mesh.backend != "mpi":
            shape = _infer_shape(table, spec)
        else:
            shape = _even_shape(first, spec)
    spec = DTensorSpec(mesh, spec.placements, TensorMeta(tuple(shape), dtype))
    if len(spec.shape) != ndim:
        raise ShardingError(f"from_local: shape {tuple(shape)} has {len(spec.shape)} dims, the shards have {ndim}")
    wrong = {}
    for r, row in table.items():
        expected = _local_block(spec.shape, mesh.shape, spec.shard_order, mesh.coordinate_of(r))[0]
        got = tuple(row[4 : 4 + ndim])
        if got != expected:
            wrong[r] = (got, expected)
    if wrong:
        detail = "; ".join(f"rank {r} holds {g}, expected {e}" for r, (g, e) in sorted(wrong.items()))
        raise ShardingError(
            f"from_local: shards do not tile global shape {spec.shape} with placements "
            f"{[str(p) for p in spec.placements]} (torch.chunk sizes): {detail}"
        )
    return DTensor(shards, spec)


def _rows_text(table: dict[int, tuple[int, ...]]) -> str:
    libraries = {v: k for k, v in _LIBRARIES.items()}
    parts = []
    for r, row in sorted(table.items()):
        dtype = row[2].to_bytes(8, "little").rstrip(b"\0").decode()
        parts.append(f"rank {r}: {libraries[row[1]]} {np.dtype(dtype)} {tuple(row[4:4 + row[3]])}")
    return "; ".join(parts)


def _infer_shape(table: dict[int, tuple[int, ...]], spec: DTensorSpec) -> tuple[int, ...]:
    """Global shape from every rank's local shape: sizes along a sharded dim add up over its mesh dims."""
    mesh = spec.mesh
    ndim = spec.ndim
    by_coord = {mesh.coordinate_of(r): row for r, row in table.items()}
    zero = (0,) * mesh.ndim
    shape = list(by_coord[zero][4 : 4 + ndim])
    for d, mesh_dims in spec.shard_order:  # type: ignore[union-attr]
        total = 0
        for coord, row in by_coord.items():
            if all(c == 0 for m, c in enumerate(coord) if m not in mesh_dims):
                total += row[4 + d]
        shape[d] = total
    return tuple(shape)


def _even_shape(row: tuple[int, ...], spec: DTensorSpec) -> tuple[int, ...]:
    """Global shape assuming even shards (no check, no communication)."""
    shape = list(row[4 : 4 + spec.ndim])
    for d, mesh_dims in spec.shard_order:  # type: ignore[union-attr]
        for m in mesh_dims:
            shape[d] *= spec.mesh.shape[m]
    return tuple(shape)
