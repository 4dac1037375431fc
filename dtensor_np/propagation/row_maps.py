"""Rows of one or more arrays laid out anew along one axis: the rule of ``insert``, ``delete``, ``append``, ``pad``,
``resize`` and ``block`` (:mod:`dtensor_np.functions.reshaping`).

:func:`row_map` takes pieces (arrays of one shape but along ``axis``) and a
static list of *segments* ``(piece, start, step, count)``: output row ``j``
is row ``start + i * step`` of ``piece`` for the ``i``-th row of its segment,
the segments laid end to end.  ``np.delete`` keeps the rows it does not
delete, ``np.insert`` interleaves the rows of a second piece (the values),
``np.pad`` repeats, reflects or wraps edge rows, ``np.resize`` repeats the
flattened array, ``np.concatenate`` lays the pieces end to end.

Where it runs:

* ``axis`` not sharded: every rank takes its output from its own blocks, no
  communication.  Every other placement is kept (the output is placed like
  the largest piece; the other pieces are placed alike).
* ``axis`` sharded: each output row goes from the rank that owns its source
  row to the rank that holds its place in the output's ``torch.chunk`` layout
  in one ``exchange`` (an ``Alltoallv``, counted as ``all_to_all``): a rank
  passes MPI only the rows it sends away, a row already in place does not
  move, and none is made when no row changes owner.  A piece that is
  replicated along ``axis`` (the values of ``insert``, the constant rows of
  ``pad``) is there already on every rank: its rows never move.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(6.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = row_map(x, axis=0, segments=((0, 1, 1, 5),))   # delete row 0: rank 1's row 3 moves to rank 0
    >>> y.full_tensor().tolist(), str(y.spec), c.counts["all_to_all"]
    ([1.0, 2.0, 3.0, 4.0, 5.0], 'S(0)', 1)
"""

from __future__ import annotations

import operator
from typing import Any, Hashable, Sequence

import numpy as np

from collectives import array_module, memo

from ..arrays import array_function
from ..errors import ShardingError
from ..placements import Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, partial_free, single_sharding
from .registry import Decision, OpRule, register
from .row_moves import gather_rows

__all__ = ["row_map", "sources_of", "Segment"]

Segment = tuple[int, int, int, int]
"""``(piece, start, step, count)``: rows ``start, start + step, ...`` (``count`` of them) of ``piece``."""


def sources_of(segments: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray]:
    """``(piece, row)`` of every output row, as two int arrays.

    Example:
        >>> [a.tolist() for a in sources_of(((0, 3, -1, 2), (1, 0, 0, 2)))]
        [[0, 0, 1, 1], [3, 2, 0, 0]]
    """
    if not segments:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    pieces = np.concatenate([np.full(c, p, np.intp) for p, _, _, c in segments])
    rows = np.concatenate([s + t * np.arange(c, dtype=np.intp) for _, s, t, c in segments])
    return pieces, rows


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.intp)]).astype(np.intp)


@array_function
def row_map(*pieces: Any, axis: int = 0, segments: Sequence[Segment] = ()) -> Any:
    """The rows ``segments`` name, of ``pieces`` (arrays of one shape but along ``axis``), laid end to end along
    ``axis``, in the dtype NumPy's ``concatenate`` of the pieces has (see the module docstring).

    Example:
        >>> row_map(np.arange(3), np.array([9]), axis=0, segments=((0, 2, -1, 3), (1, 0, 0, 2))).tolist()
        [2, 1, 0, 9, 9]
    """
    whole = np.concatenate(pieces, axis=axis)
    starts = _offsets([p.shape[axis] for p in pieces])
    piece, row = sources_of(segments)
    return np.take(whole, starts[piece] + row, axis=axis)


def _bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    pieces = tuple(array_operands(args))
    if not pieces or not all(is_sharded(p) for p in pieces):
        raise TypeError("row_map: every piece must be an array")
    segments = tuple(tuple(operator.index(v) for v in s) for s in kwargs.get("segments", ()))
    if set(kwargs) - {"axis", "segments"} or any(len(s) != 4 for s in segments):
        raise TypeError(f"row_map(*pieces, axis, segments): got {sorted(kwargs)}")
    return pieces, (axis_index(kwargs.get("axis", 0), pieces[0].ndim), segments)


def _check(specs: Sequence[DTensorSpec], axis: int, segments: Sequence[Segment]) -> None:
    first = specs[0]
    for i, s in enumerate(specs[1:], 1):
        if s.ndim != first.ndim:
            raise ValueError(f"all the input array dimensions except for the concatenation axis must match exactly, "
                             f"but the array at index 0 has {first.ndim} dimension(s) and the array at index {i} "
                             f"has {s.ndim} dimension(s)")
        for d in range(first.ndim):
            if d != axis and s.shape[d] != first.shape[d]:
                raise ValueError(f"all the input array dimensions except for the concatenation axis must match "
                                 f"exactly, but along dimension {d}, the array at index 0 has size {first.shape[d]} "
                                 f"and the array at index {i} has size {s.shape[d]}")
    for p, start, step, count in segments:
        if not 0 <= p < len(specs) or count < 0:
            raise ShardingError(f"row_map: bad segment {(p, start, step, count)}")
        n = specs[p].shape[axis]
        if count and not (0 <= start < n and 0 <= start + step * (count - 1) < n):
            raise IndexError(f"row_map: rows {start}..{start + step * (count - 1)} of a piece of {n}")


@memo(maxsize=256, name="dtensor_np.row_map_plans")
def _plan(specs: tuple[DTensorSpec, ...], out: DTensorSpec, axis: int, m: int, segments: tuple) -> tuple:
    """``(groups, owner, target, local_row)``: every output row's source member, target member, and the row of
    the source member's concatenated blocks it is (the same for every group: positions by member)."""
    mesh = out.mesh
    groups = mesh.groups((m,))
    members = groups[0]
    k = len(members)
    piece, row = sources_of(segments)
    n_out = out.shape[axis]
    # the target: the member whose output chunk holds position j
    out_starts = [out.local_block(r)[1][axis] for r in members]
    out_sizes = [out.local_block(r)[0][axis] for r in members]
    target = np.zeros(n_out, np.intp)
    for p in range(k):
        target[out_starts[p]:out_starts[p] + out_sizes[p]] = p
    owner = target.copy()
    local_row = np.zeros(n_out, np.intp)
    # each member's concatenated blocks: where piece i starts in it, and the rows it holds
    base = np.zeros((k, len(specs)), np.intp)
    for p, r in enumerate(members):
        lengths = [s.local_block(r)[0][axis] for s in specs]
        base[p] = _offsets(lengths)[:-1]
    for i, s in enumerate(specs):
        chosen = piece == i
        if not chosen.any():
            continue
        rows = row[chosen]
        if isinstance(s.placements[m], Shard) and s.placements[m].dim == axis:
            starts = np.array([s.local_block(r)[1][axis] for r in members], np.intp)
            sizes = np.array([s.local_block(r)[0][axis] for r in members], np.intp)
            holder = np.searchsorted(starts + sizes, rows, side="right")
            owner[chosen] = holder
            local_row[chosen] = base[holder, i] + rows - starts[holder]
        else:  # whole along axis on every member: its rows are where they are needed
            owner[chosen] = target[chosen]
            local_row[chosen] = base[target[chosen], i] + rows
    return groups, owner, target, local_row


def _decide(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axis, segments = key
    _check(specs, axis, segments)
    specs = tuple(single_sharding(partial_free(s)) for s in specs)
    main = max(range(len(specs)), key=lambda i: (int(np.prod(specs[i].shape)), -i))
    placements = specs[main].placements
    mesh = specs[main].mesh
    m = next((d for d, p in enumerate(placements) if isinstance(p, Shard) and p.dim == axis and mesh.shape[d] > 1),
             None)
    inputs = []
    for s in specs:
        own = s.placements
        wanted = tuple((own[d] if isinstance(own[d], Shard) and own[d].dim == axis else Replicate()) if d == m else p
                       for d, p in enumerate(placements))
        inputs.append(s if wanted == own else s.with_placements(wanted))
    n_out = sum(c for _, _, _, c in segments)
    shape = specs[main].shape[:axis] + (n_out,) + specs[main].shape[axis + 1:]
    dtype = np.result_type(*(s.dtype for s in specs))
    out = DTensorSpec(mesh, placements, TensorMeta(shape, dtype))
    if m is None:
        piece, row = sources_of(segments)

        def local(rank: int, *blocks: Any) -> Any:
            xp = array_module(blocks[0])
            starts = _offsets([b.shape[axis] for b in blocks])
            return xp.take(xp.concatenate(blocks, axis=axis), xp.asarray(starts[piece] + row), axis=axis)

        return Decision(tuple(inputs), (out,), local)
    groups, owner, target, local_row = _plan(tuple(inputs), out, axis, m, segments)

    def program(backend: Any, *shards: dict[int, Any]) -> dict[int, Any]:
        """One ``exchange`` of the output rows whose source lives on another rank (none when no row moves)."""
        joined = {}
        for r in shards[0]:
            blocks = [s[r] for s in shards]
            xp = array_module(blocks[0])
            joined[r] = xp.moveaxis(xp.concatenate(blocks, axis=axis).astype(dtype, copy=False), axis, 0)

        def take(rank: int, js: np.ndarray) -> Any:
            return joined[rank][local_row[js]]

        moved = gather_rows(backend, joined, groups, owner, target, take)
        return {r: array_module(x).ascontiguousarray(array_module(x).moveaxis(x, 0, axis)) for r, x in moved.items()}

    return Decision(tuple(inputs), (out,), None, program=program)


register(row_map)(OpRule("row_map", _bind, _decide))
