"""Rules for ops that move dims: transpose, swapaxes, moveaxis, reshape, ravel,
expand_dims, squeeze, concatenate and stack.

Permutations carry every placement along.  ``reshape`` keeps a sharding when
the sharded dim survives unchanged, or when it is the outermost dim of a
merge or split and the mesh dim divides both sizes (then every rank's block
stays contiguous); otherwise that dim is replicated first.  Pending sums pass
through all of these (they are linear).

Example:
    >>> reshape_groups((4, 3, 2), (12, 2))
    [((0, 1), (0,)), ((2,), (1,))]
"""

from __future__ import annotations

import math
import string
from typing import Any, Hashable, Sequence

import numpy as np

from collectives import array_module, frozen

from ..errors import ShardingError
from ..int_tuple import as_ints, is_integer
from ..placements import Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta
from .common import axis_index, axis_tuple, harmonize, normalize_axes, settle, single_sharding
from .einop import einop_rule
from ..sharded import array_operands, is_sharded
from .registry import Decision, OpRule, register
from .row_moves import move_ranges

__all__ = ["permute_decision", "reshape_decision", "reshape_groups", "resolve_shape"]


# -- permutations -------------------------------------------------------------
def permute_decision(spec: DTensorSpec, perm: Sequence[int]) -> Decision:
    """Output dim ``i`` is input dim ``perm[i]``; shards follow their dims."""
    perm = axis_tuple(perm, spec.ndim, "axes", lists=True)
    if len(perm) != spec.ndim:
        raise ShardingError(f"axes {perm} don't match array: expected a permutation of its {spec.ndim} dims")
    placements = tuple(Shard(perm.index(p.dim)) if isinstance(p, Shard) else p for p in spec.placements)
    order = tuple(sorted((perm.index(d), ms) for d, ms in spec.shard_order))  # type: ignore[union-attr]
    out = DTensorSpec(spec.mesh, placements, TensorMeta(tuple(spec.shape[p] for p in perm), spec.dtype), order)
    return Decision((spec,), (out,), lambda rank, x: np.transpose(x, perm))


def _bind_single(names: Sequence[str]):
    """A binder for ``f(a, *static)``: the DTensor is the first argument."""

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        values = list(args[1:]) + [kwargs.pop(n) for n in names[len(args) - 1 :] if n in kwargs]
        if kwargs:
            raise ShardingError(f"unsupported keywords {sorted(kwargs)}")
        return (args[0],), frozen(values)

    return bind


def _decide_transpose(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    axes = key[0] if key and key[0] is not None else tuple(reversed(range(specs[0].ndim)))
    return permute_decision(specs[0], axes)


def _decide_swapaxes(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    a, b = (axis_index(k, specs[0].ndim, name) for k, name in zip(key, ("axis1", "axis2")))
    perm = list(range(specs[0].ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute_decision(specs[0], perm)


def _decide_moveaxis(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    ndim = specs[0].ndim
    source, destination = key
    src = axis_tuple(source, ndim, "source", lists=True)
    dst = axis_tuple(destination, ndim, "destination", lists=True)
    if len(src) != len(dst):
        raise ShardingError(f"moveaxis: `source` {source} and `destination` {destination} must have the same number of elements")
    order = [n for n in range(ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_decision(specs[0], order)


register(np.transpose)(OpRule("transpose", _bind_single(("axes",)), _decide_transpose))
register(np.swapaxes)(OpRule("swapaxes", _bind_single(("axis1", "axis2")), _decide_swapaxes))
register(np.moveaxis)(OpRule("moveaxis", _bind_single(("source", "destination")), _decide_moveaxis))


# -- reshape -------------------------------------------------------------------
def resolve_shape(shape: Sequence[int], size: int) -> tuple[int, ...]:
    """A reshape target with its unknown length (any negative one, as NumPy 2) filled in; ValueError as NumPy when
    it cannot fit.

    Example:
        >>> resolve_shape((-1, 5), 15), resolve_shape((-2, 15), 15)
        ((3, 5), (1, 15))
    """
    shape = tuple(int(s) for s in shape)
    unknown = sum(s < 0 for s in shape)
    if unknown > 1:
        raise ValueError("can only specify one unknown dimension")
    known = 1
    for s in shape:
        if s >= 0:
            known *= s
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
        shape = tuple(size // known if s < 0 else s for s in shape)
    elif known != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {shape}")
    return shape


def reshape_groups(ishape: Sequence[int], oshape: Sequence[int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Pair runs of input dims with runs of output dims of equal size (the dims a reshape merges or splits)."""
    groups = []
    i = j = 0
    n, m = len(ishape), len(oshape)
    while i < n or j < m:
        gi, go = [], []
        pi = po = 1
        if i < n:
            gi.append(i)
            pi *= ishape[i]
            i += 1
        if j < m:
            go.append(j)
            po *= oshape[j]
            j += 1
        while pi != po:
            if pi < po and i < n:
                gi.append(i)
                pi *= ishape[i]
                i += 1
            elif j < m:
                go.append(j)
                po *= oshape[j]
                j += 1
            else:
                break
        groups.append((tuple(gi), tuple(go)))
    return groups


def reshape_decision(spec: DTensorSpec, oshape: Sequence[int]) -> Decision:
    """The decision of ``reshape(spec, oshape)`` (C order).

    A dim sharded as the outermost dim of a run the reshape merges or splits
    stays sharded, on the run's outermost output dim.  When the chunks do not
    line up (``(23, 5) -> (115,)`` on 4 ranks: rows of 6, 6, 6, 5 become 29,
    29, 29, 28 elements), only the elements that change owner move, with one
    ``rechunk`` (an ``Alltoallv``) on that mesh dim, never a gather.  A
    sharded inner dim of such a run is gathered (replicated) first.
    """
    spec = single_sharding(spec)
    ishape = spec.shape
    oshape = resolve_shape(oshape, int(np.prod(ishape, dtype=np.int64)))
    mesh = spec.mesh
    inputs: list[Placement] = []
    outputs: list[Placement] = []
    moves: list[tuple[int, tuple[int, ...]]] = []  # (mesh dim, the input run merged and re-cut along it)
    groups = reshape_groups(ishape, oshape) if 0 not in ishape else []
    for m, p in enumerate(spec.placements):
        if not isinstance(p, Shard):
            inputs.append(p)
            outputs.append(p)
            continue
        k = mesh.shape[m]
        target = None
        for gi, go in groups:
            if p.dim not in gi:
                continue
            in_real = [d for d in gi if ishape[d] != 1]
            out_real = [d for d in go if oshape[d] != 1]
            if not in_real or p.dim != in_real[0] or not out_real:
                break
            o = out_real[0]
            target = o
            if not (len(in_real) == 1 and len(out_real) == 1) and not (ishape[p.dim] % k == 0 and oshape[o] % k == 0):
                moves.append((m, gi))
            break
        if target is None:
            inputs.append(Replicate())
            outputs.append(Replicate())
        else:
            inputs.append(p)
            outputs.append(Shard(target))
    if len(moves) > 1:  # re-cut one run at most; the others are gathered
        for m, _ in moves[1:]:
            inputs[m] = outputs[m] = Replicate()
        moves = moves[:1]
    in_spec = DTensorSpec(mesh, tuple(inputs), spec.tensor_meta)
    out_spec = DTensorSpec(mesh, tuple(outputs), TensorMeta(oshape, spec.dtype))

    shapes: dict[int, tuple[int, ...]] = {}  # rank -> its local output shape, worked out once

    def local(rank: int, x: Any) -> Any:
        shape = shapes.get(rank)
        if shape is None:
            shape = shapes[rank] = out_spec.local_shape_of_rank(rank)
        return np.reshape(x, shape)

    if not moves:
        return Decision((in_spec,), (out_spec,), local)
    (m, run), = moves
    first, count = run[0], len(run)
    groups_m = mesh.groups((m,))

    def run_length(s: DTensorSpec, rank: int, dims: Sequence[int]) -> int:
        shape = s.local_shape_of_rank(rank)
        return int(np.prod([shape[d] for d in dims], dtype=np.int64))

    out_run = next(go for gi, go in groups if gi == run)
    in_sizes = {r: run_length(in_spec, r, run) for r in mesh.all_ranks}
    out_sizes = {r: run_length(out_spec, r, out_run) for r in mesh.all_ranks}

    def program(backend: Any, shards: dict[int, Any]) -> dict[int, Any]:
        """One ``rechunk`` of the merged run along mesh dim ``m``: only the elements that change owner move."""
        merged = {r: np.reshape(x, x.shape[:first] + (-1,) + x.shape[first + count:]) if x.size else
                  x.reshape(x.shape[:first] + (in_sizes[r],) + x.shape[first + count:]) for r, x in shards.items()}
        moved = backend.rechunk(merged, groups_m, axis=first, in_sizes=in_sizes, out_sizes=out_sizes)
        return {r: local(r, x) for r, x in moved.items()}

    return Decision((in_spec,), (out_spec,), None, program=program)


def _bind_reshape(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    given = "newshape" in kwargs or "shape" in kwargs or len(args) > 1
    shape = kwargs.pop("newshape", kwargs.pop("shape", args[1] if len(args) > 1 else None))
    order = kwargs.pop("order", args[2] if len(args) > 2 else "C")
    kwargs.pop("copy", None)
    if order != "C" or kwargs or not given:
        raise ShardingError("numpy.reshape on DTensors supports a shape in C order only")
    if shape is None:  # NumPy 2: the shape unchanged
        return (args[0],), tuple(args[0].shape)
    if is_integer(shape):
        return (args[0],), (int(shape),)
    return (args[0],), as_ints(shape, "numpy.reshape: the new shape", "an int or a sequence of ints")


def _bind_ravel(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
    if kwargs.get("order", args[1] if len(args) > 1 else "C") != "C":
        raise ShardingError("numpy.ravel on DTensors supports C order only")
    return (args[0],), (-1,)


register(np.reshape)(OpRule("reshape", _bind_reshape, lambda specs, shape: reshape_decision(specs[0], shape)))
register(np.ravel)(OpRule("ravel", _bind_ravel, lambda specs, shape: reshape_decision(specs[0], shape)))


# -- inserting and removing size-1 dims -------------------------------------
def _map_dims(spec: DTensorSpec, mapping: dict[int, int], out_shape: tuple[int, ...], dropped: Sequence[int]) -> tuple[DTensorSpec, DTensorSpec]:
    placements_in = []
    placements_out = []
    for p in spec.placements:
        if isinstance(p, Shard) and p.dim in dropped:
            placements_in.append(Replicate())
            placements_out.append(Replicate())
        elif isinstance(p, Shard):
            placements_in.append(p)
            placements_out.append(Shard(mapping[p.dim]))
        else:
            placements_in.append(p)
            placements_out.append(p)
    in_spec = DTensorSpec(spec.mesh, tuple(placements_in), spec.tensor_meta)
    return in_spec, DTensorSpec(spec.mesh, tuple(placements_out), TensorMeta(out_shape, spec.dtype))


def _decide_expand_dims(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    spec = single_sharding(specs[0])
    axis = key[0]
    out_ndim = spec.ndim + (len(axis) if isinstance(axis, tuple) else 1)
    new = normalize_axes(axis, out_ndim) or ()
    kept = [d for d in range(out_ndim) if d not in new]
    mapping = {i: kept[i] for i in range(spec.ndim)}
    out_shape = tuple(1 if d in new else spec.shape[kept.index(d)] for d in range(out_ndim))
    in_spec, out_spec = _map_dims(spec, mapping, out_shape, ())
    return Decision((in_spec,), (out_spec,), lambda rank, x: np.expand_dims(x, new))


def _decide_squeeze(specs: tuple[DTensorSpec, ...], key: Any) -> Decision:
    spec = single_sharding(specs[0])
    axis = key[0] if key else None
    drop = normalize_axes(axis, spec.ndim, legacy_0d=True) if axis is not None else tuple(d for d, s in enumerate(spec.shape) if s == 1)
    for d in drop:
        if spec.shape[d] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    kept = [d for d in range(spec.ndim) if d not in drop]
    mapping = {d: kept.index(d) for d in kept}
    in_spec, out_spec = _map_dims(spec, mapping, tuple(spec.shape[d] for d in kept), drop)
    return Decision((in_spec,), (out_spec,), lambda rank, x: np.squeeze(x, axis=drop))


register(np.expand_dims)(OpRule("expand_dims", _bind_single(("axis",)), _decide_expand_dims))
register(np.squeeze)(OpRule("squeeze", _bind_single(("axis",)), _decide_squeeze))


# -- joining ---------------------------------------------------------------------
def _bind_join(name: str):
    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        arrays = args[0]
        axis = kwargs.pop("axis", args[1] if len(args) > 1 else 0)
        if kwargs or (axis is None and name != "concatenate"):
            raise ShardingError(f"numpy.{name} on DTensors takes a sequence of DTensors and an int axis")
        arrays = tuple(array_operands(arrays))
        if not arrays or not all(is_sharded(a) for a in arrays):
            raise TypeError(f"numpy.{name}: every array must be a DTensor; distribute plain arrays first")
        return arrays, (frozen(axis), len(arrays))

    return bind


def _join_decision(specs: tuple[DTensorSpec, ...], axis: Any, new_axis: bool) -> Decision:
    specs = tuple(single_sharding(s) for s in specs)
    if axis is None:  # concatenate the flattened arrays
        if all(s.ndim == 1 for s in specs):
            axis = 0
        else:  # flattening an n-d sharding does not follow the 1-d chunks: every input is gathered (all_gather)
            specs = tuple(s.with_placements((Replicate(),) * s.mesh.ndim) for s in specs)
            dtype = np.result_type(*(s.dtype for s in specs))
            size = sum(math.prod(s.shape) for s in specs)
            out = DTensorSpec(specs[0].mesh, specs[0].placements, TensorMeta((size,), dtype))
            return Decision(specs, (out,), lambda rank, *xs: np.concatenate(xs, axis=None))
    ndim = specs[0].ndim
    out_ndim = ndim + new_axis
    axis = axis_index(axis, out_ndim)
    letters = string.ascii_lowercase[:ndim]
    if new_axis:
        if len({s.shape for s in specs}) != 1:
            raise ValueError("all input arrays must have the same shape")
        ins = [letters] * len(specs)
        out = letters[:axis] + "1" + letters[axis:]
    else:
        if any(s.ndim != ndim for s in specs):
            raise ValueError("all the input arrays must have same number of dimensions")
        chars = letters[:axis] + "1" + letters[axis + 1 :]
        ins = [chars] * len(specs)
        out = chars
    if not new_axis:
        moved = _concatenate_sharded(specs, axis)
        if moved is not None:
            return moved
    equation = f"{','.join(ins)}->{out}"
    specs = harmonize(equation, specs)
    inputs, out_spec = settle(lambda ss: einop_rule(equation, ss, linearity=True), specs)
    shape = list(out_spec.shape)
    shape[axis] = len(specs) if new_axis else sum(s.shape[axis] for s in specs)
    out_spec = DTensorSpec(out_spec.mesh, out_spec.placements, TensorMeta(tuple(shape), specs[0].dtype))
    func = np.stack if new_axis else np.concatenate
    return Decision(inputs, (out_spec,), lambda rank, *xs: func(xs, axis=axis))


def _concatenate_sharded(specs: Sequence[DTensorSpec], axis: int) -> Decision | None:
    """``concatenate`` along a dim sharded on one mesh dim, kept sharded: each input's rows go to the ranks
    whose block of the result holds them, one ``all_to_all`` per input moving only the rows that change owner
    (:func:`~.row_moves.move_ranges`); no gather.  None where no input shards ``axis`` or a pending sum is
    involved (the einop path decides).

    Example:
        >>> from dtensor_np import DeviceMesh
        >>> mesh = DeviceMesh((2,))
        >>> a = DTensorSpec(mesh, (Shard(0),), TensorMeta((5, 2), "f8"))
        >>> str(_concatenate_sharded((a, a), 0).outputs[0]), _concatenate_sharded((a, a), 0).outputs[0].shape
        ('S(0)', (10, 2))
    """
    if any(p.is_partial() for s in specs for p in s.placements):
        return None
    sharding = [(math.prod(s.shape), i) for i, s in enumerate(specs)
                if any(isinstance(p, Shard) and p.dim == axis and s.mesh.shape[m] > 1 for m, p in enumerate(s.placements))]
    if not sharding:
        return None
    placements = specs[max(sharding)[1]].placements
    mesh_dim = next(m for m, p in enumerate(placements) if isinstance(p, Shard) and p.dim == axis)
    inputs = tuple(s.with_placements(placements) for s in specs)
    shape = list(inputs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in inputs)
    out_spec = DTensorSpec(inputs[0].mesh, placements, TensorMeta(tuple(shape), np.result_type(*(s.dtype for s in inputs))))
    groups = out_spec.mesh.groups((mesh_dim,))
    ranks = [r for g in groups for r in g]

    def span(spec: DTensorSpec, rank: int, start: int) -> tuple[int, int]:
        size, offset = spec.local_block(rank)
        return start + offset[axis], start + offset[axis] + size[axis]

    moves, start = [], 0
    for spec in inputs:
        end = start + spec.shape[axis]
        have = {r: span(spec, r, start) for r in ranks}
        want = {}
        for r in ranks:
            lo, hi = span(out_spec, r, 0)
            lo, hi = max(lo, start), min(hi, end)
            want[r] = (lo, max(lo, hi))
        moves.append((have, want))
        start = end
    dtype = out_spec.dtype

    def program(backend: Any, *shards: dict[int, Any]) -> dict[int, Any]:
        pieces = [move_ranges(backend, {r: x.astype(dtype, copy=False) for r, x in s.items()}, groups, axis, have, want)
                  for s, (have, want) in zip(shards, moves)]
        return {r: array_module(pieces[0][r]).concatenate([p[r] for p in pieces], axis=axis) for r in pieces[0]}

    return Decision(inputs, (out_spec,), None, program=program)


register(np.concatenate)(
    OpRule("concatenate", _bind_join("concatenate"), lambda specs, key: _join_decision(specs, key[0], False))
)
register(np.stack)(OpRule("stack", _bind_join("stack"), lambda specs, key: _join_decision(specs, key[0], True)))
