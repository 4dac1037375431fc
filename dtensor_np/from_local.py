"""``DTensor.from_local``: wrap shards the ranks already hold, checked on every rank at once.

The check turns each rank's shard into a short row of ints (status, array
library, dtype, shape, and a checksum of its data), shares the rows with one
small collective, and then every rank makes the same decision from the same
rows: either all ranks go on, or all raise, so one bad shard never leaves the
others waiting in a collective.  Ranks that hold the same block (they differ
only in mesh dims placed ``Replicate``) must hold the same data: their
checksums must agree, so replicated values that differ by rank are refused
instead of giving different results on different ranks later.
``run_check=False`` skips the check and its communication.
"""

from __future__ import annotations

import zlib
from typing import Any, Mapping, Optional, Sequence

import numpy as np


from collectives.dtypes import dtype_code, dtype_name

from .arrays import array_library, check_array, checksum
from .errors import ShardingError
from .int_tuple import as_ints
from .local_tensor import LocalTensor
from .mesh import DeviceMesh
from .placements import Placement, Shard
from .sharded import is_sharded
from .runtime import backend_for
from .spec import DTensorSpec, TensorMeta

__all__ = ["build_from_local", "MAX_NDIM"]

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


def _describe(x: Any, placements: Sequence[Placement], replicated: bool) -> tuple[list[int], Optional[Exception]]:
    """This shard's row of ints, and the local error it would raise (if any); with a checksum when ``replicated``."""
    if is_sharded(x) or isinstance(x, LocalTensor) or not hasattr(x, "dtype") or not hasattr(x, "shape"):
        err: Exception = TypeError(f"from_local expects a NumPy or CuPy array for each shard, got {type(x).__name__}")
        return [_BAD_TYPE] + [0] * (4 + MAX_NDIM), err
    try:
        check_array(x, "local shard")
    except TypeError as e:
        return [_SUBCLASS if type(x) is not np.ndarray and isinstance(x, np.ndarray) else _BAD_DTYPE] + [0] * (4 + MAX_NDIM), e
    shard_dims = [p.dim for p in placements if isinstance(p, Shard)]
    ndim = x.ndim
    if ndim > MAX_NDIM or any(not -ndim <= d < ndim for d in shard_dims):
        err = ShardingError(
            f"a {ndim}-d local shard cannot take placements {[str(p) for p in placements]}"
            + (f" (at most {MAX_NDIM} dims)" if ndim > MAX_NDIM else "")
        )
        return [_BAD_NDIM] + [0] * (4 + MAX_NDIM), err
    row = [_OK, _LIBRARIES[array_library(x)], dtype_code(x.dtype), ndim] + list(x.shape) + [0] * (MAX_NDIM - ndim)
    row.append(checksum(x) if replicated else 0)
    return row, None


def build_from_local(
    local: Any,
    mesh: DeviceMesh,
    placements: Sequence[Placement],
    shape: Optional[Sequence[int]],
    run_check: bool,
) -> tuple[dict[int, Any], DTensorSpec]:
    """The shards this process holds and the spec of the DTensor they make (see ``DTensor.from_local``)."""
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
    replicated = run_check and any(p.is_replicate() and n > 1 for p, n in zip(spec0.placements, mesh.shape))
    call = zlib.crc32(repr((spec0.placements, None if shape is None else tuple(shape))).encode())
    for r, x in shards.items():
        if mesh.backend == "mpi" and isinstance(x, (Mapping, LocalTensor)):
            rows[r] = [_MAPPING] + [0] * (4 + MAX_NDIM)
            errors[r] = TypeError("under MPI, from_local takes this rank's own array, not a mapping of ranks")
            continue
        rows[r], err = _describe(x, spec0.placements, replicated)
        if err is not None:
            errors[r] = err
    rows = {r: row + [call] for r, row in rows.items()}
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
    odd = sorted(r for r, row in table.items() if row[-1] != first[-1])
    if odd:
        raise ShardingError(
            f"from_local: every rank must pass the same placements and shape argument; ranks {odd} passed "
            f"others than rank {min(table)}"
        )
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
        expected = spec.local_shape_of_rank(r)
        got = tuple(row[4 : 4 + ndim])
        if got != expected:
            wrong[r] = (got, expected)
    if wrong:
        detail = "; ".join(f"rank {r} holds {g}, expected {e}" for r, (g, e) in sorted(wrong.items()))
        raise ShardingError(
            f"from_local: shards do not tile global shape {spec.shape} with placements "
            f"{[str(p) for p in spec.placements]} (torch.chunk sizes): {detail}"
        )
    if replicated:
        _check_replicas(table, spec)
    return dict(shards), spec


def _check_replicas(table: dict[int, tuple[int, ...]], spec: DTensorSpec) -> None:
    """ShardingError unless the ranks that hold one block (they differ only in Replicate mesh dims) hold the same data."""
    mesh = spec.mesh
    kept = [m for m, p in enumerate(spec.placements) if not p.is_replicate()]
    holders: dict[tuple[int, ...], list[int]] = {}
    for r in sorted(table):
        coordinate = mesh.coordinate_of(r)
        holders.setdefault(tuple(coordinate[m] for m in kept), []).append(r)
    for ranks in holders.values():
        sums = {r: table[r][4 + MAX_NDIM] for r in ranks}
        if len(set(sums.values())) > 1:
            first = ranks[0]
            odd = [r for r in ranks if sums[r] != sums[first]]
            raise ShardingError(
                f"from_local: ranks {ranks} hold the same block of a {spec} array (they differ only in Replicate "
                f"mesh dims), so their data must be equal; rank {first}'s data differs from rank(s) {odd}'s "
                "(checksums disagree). Make them equal (e.g. broadcast from one rank), or place the array "
                "another way; run_check=False skips this check"
            )


def _rows_text(table: dict[int, tuple[int, ...]]) -> str:
    libraries = {v: k for k, v in _LIBRARIES.items()}
    parts = []
    for r, row in sorted(table.items()):
        parts.append(f"rank {r}: {libraries[row[1]]} {dtype_name(row[2])} {tuple(row[4:4 + row[3]])}")
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
