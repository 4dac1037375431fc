"""Small spec transformations shared by the op rules (pure)."""

from __future__ import annotations

import operator
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..errors import AxisError, ShardingError
from ..int_tuple import product
from ..placements import Partial, Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta, default_shard_order
from .einop import OutputSharding, parse_equation

__all__ = [
    "keepdims_flag",
    "sharding_mesh_dim",
    "single_sharding",
    "harmonize",
    "single_partials",
    "settle_keeping",
    "replicate_mesh_dims",
    "with_meta",
    "settle",
    "normalize_axes",
    "axis_index",
    "axis_tuple",
    "partial_free",
]

_R = Replicate()


def single_sharding(spec: DTensorSpec) -> DTensorSpec:
    """``spec`` with every tensor dim sharded on at most one mesh dim (its outermost split).

    The einsum-style rules describe a sharding by a dim map, which has one
    mesh dim per tensor dim; inner splits are replicated first.
    """
    if spec.shard_order == default_shard_order(spec.placements) and all(
        len(ms) == 1 for _, ms in spec.shard_order  # type: ignore[union-attr]
    ):
        return spec
    placements = list(spec.placements)
    for _, mesh_dims in spec.shard_order:  # type: ignore[union-attr]
        for m in mesh_dims[1:]:
            placements[m] = _R
    return DTensorSpec(spec.mesh, tuple(placements), spec.tensor_meta)


def replicate_mesh_dims(spec: DTensorSpec, mesh_dims: Iterable[int]) -> DTensorSpec:
    """``spec`` with the given mesh dims made ``Replicate`` (inner splits of the same tensor dims too)."""
    mesh_dims = set(mesh_dims)
    if not mesh_dims:
        return spec
    placements = list(spec.placements)
    order = dict(spec.shard_order)  # type: ignore[arg-type]
    for m in list(mesh_dims):
        p = placements[m]
        if isinstance(p, Shard):
            ms = order[p.dim]
            for inner in ms[ms.index(m):]:
                mesh_dims.add(inner)
    for m in mesh_dims:
        placements[m] = _R
    new_order = tuple((d, tuple(x for x in ms if x not in mesh_dims)) for d, ms in order.items())
    return DTensorSpec(spec.mesh, tuple(placements), spec.tensor_meta, tuple((d, ms) for d, ms in new_order if ms))


def partial_free(spec: DTensorSpec, keep: Callable[[int, Partial], bool] = lambda m, p: False) -> DTensorSpec:
    """``spec`` with its ``Partial`` mesh dims reduced to ``Replicate`` (except where ``keep`` says)."""
    placements = tuple(
        _R if isinstance(p, Partial) and not keep(m, p) else p for m, p in enumerate(spec.placements)
    )
    if placements == spec.placements:
        return spec
    return DTensorSpec(spec.mesh, placements, spec.tensor_meta, spec.shard_order)


def harmonize(equation: str, specs: Sequence[DTensorSpec]) -> tuple[DTensorSpec, ...]:
    """Inputs that shard one dim of ``equation`` on different mesh dims agree first.

    The largest input keeps its mesh dim; the others replicate theirs, so the
    einop rule never sees a dim "sharded two different ways" from plain NumPy code.
    """
    input_dims, _ = parse_equation(equation)
    uses: dict[str, list[tuple[int, int]]] = {}
    for i, (dims, spec) in enumerate(zip(input_dims, specs)):
        for c, m in zip(dims, spec.dim_map):
            if c != "1" and m != -1:
                uses.setdefault(c, []).append((i, m))
    drop: dict[int, set[int]] = {}
    for c, found in uses.items():
        if len({m for _, m in found}) < 2:
            continue
        keep = max(found, key=lambda u: (product(specs[u[0]].shape), -u[0]))[1]
        for i, m in found:
            if m != keep:
                drop.setdefault(i, set()).add(m)
    return tuple(replicate_mesh_dims(s, drop[i]) if i in drop else s for i, s in enumerate(specs))


def single_partials(specs: Sequence[DTensorSpec], allowed: Optional[Iterable[int]] = None) -> dict[int, tuple[int, Partial]]:
    """Mesh dims whose pending sum can stay pending through a product: ``{mesh_dim: (input, placement)}``.

    That is where exactly one input (among ``allowed``, default all) holds a
    ``Partial`` sum or avg and no input is sharded: the op is linear in that input.
    """
    allowed = None if allowed is None else set(allowed)
    keep: dict[int, tuple[int, Partial]] = {}
    for m in range(specs[0].mesh.ndim):
        holders = [i for i, s in enumerate(specs) if isinstance(s.placements[m], Partial)]
        if len(holders) != 1 or (allowed is not None and holders[0] not in allowed):
            continue
        p = specs[holders[0]].placements[m]
        if p.reduce_op in ("sum", "avg") and not any(isinstance(s.placements[m], Shard) for s in specs):  # type: ignore[union-attr]
            keep[m] = (holders[0], p)  # type: ignore[assignment]
    return keep


def settle_keeping(
    rule: Callable[[tuple[DTensorSpec, ...]], OutputSharding],
    specs: Sequence[DTensorSpec],
    keep: Mapping[int, tuple[int, Partial]],
) -> tuple[tuple[DTensorSpec, ...], DTensorSpec]:
    """:func:`settle` with every pending sum reduced except those in ``keep``, which stay on their input and the output."""
    inputs, out = settle(rule, tuple(partial_free(s) for s in specs))
    if not keep:
        return inputs, out
    inputs = tuple(
        s.with_placements(
            tuple(keep[m][1] if m in keep and keep[m][0] == i else p for m, p in enumerate(s.placements)),
            s.shard_order,
        )
        for i, s in enumerate(inputs)
    )
    out = out.with_placements(tuple(keep[m][1] if m in keep else p for m, p in enumerate(out.placements)), out.shard_order)
    return inputs, out


def with_meta(spec: DTensorSpec, shape: Sequence[int], dtype: Any = None) -> DTensorSpec:
    """``spec`` with a new global shape (and dtype)."""
    dtype = spec.tensor_meta.dtype if dtype is None and spec.tensor_meta is not None else dtype
    return DTensorSpec(spec.mesh, spec.placements, TensorMeta(tuple(shape), dtype), spec.shard_order)


def settle(rule: Callable[[tuple[DTensorSpec, ...]], OutputSharding], specs: tuple[DTensorSpec, ...]) -> tuple[tuple[DTensorSpec, ...], DTensorSpec]:
    """Run a propagation rule, following its redistribute suggestion once: (input specs, output spec)."""
    result = rule(specs)
    if result.output_spec is not None:
        return specs, result.output_spec
    suggested = result.redistribute_specs
    assert suggested is not None
    again = rule(suggested)
    if again.output_spec is None:  # pragma: no cover - suggestions are always consistent
        raise ShardingError(f"sharding propagation did not settle for inputs {[str(s) for s in specs]}")
    return suggested, again.output_spec


def sharding_mesh_dim(spec: DTensorSpec, axis: int) -> Optional[int]:
    """The mesh dim (of more than one rank) that shards tensor dim ``axis`` of a single-sharding spec, or None.

    Example:
        >>> from dtensor_np.mesh import DeviceMesh
        >>> spec = DTensorSpec(DeviceMesh((1, 2)), (Shard(0), Shard(0)), TensorMeta((4,), "f8"))
        >>> sharding_mesh_dim(spec, 0), sharding_mesh_dim(spec.with_placements((Shard(0), Replicate())), 0)
        (1, None)
    """
    for m, p in enumerate(spec.placements):
        if isinstance(p, Shard) and p.dim == axis and spec.mesh.shape[m] > 1:
            return m
    return None


def keepdims_flag(value: Any) -> bool:
    """``keepdims=`` as NumPy's ufunc reductions (``sum``, ``max``, ``var``, ``nanmax``, ``linalg.norm``) take it:
    a Python bool or int; a float, a string, None or a NumPy bool is NumPy's TypeError.

    Example:
        >>> keepdims_flag(True), keepdims_flag(0)
        (True, False)
        >>> keepdims_flag(1.0)
        Traceback (most recent call last):
        ...
        TypeError: integer argument expected, got float
    """
    if isinstance(value, (bool, int)) and not isinstance(value, np.generic):
        return bool(value)
    if isinstance(value, float):
        raise TypeError("integer argument expected, got float")
    name = type(value).__name__ if type(value).__module__ == "builtins" else f"numpy.{type(value).__name__}"
    raise TypeError(f"'{name}' object cannot be interpreted as an integer")


def axis_index(axis: Any, ndim: int, argname: Optional[str] = None, *, expected: str = "an int") -> int:
    """One axis as a dim in ``[0, ndim)``, checked like NumPy's ``normalize_axis_index``.

    Anything but a Python or NumPy integer (a bool, float, string or list) is a
    ``TypeError``; an axis out of range is an :class:`~dtensor_np.errors.AxisError`,
    which is both a ``ShardingError`` and NumPy's ``AxisError``.

    Example:
        >>> axis_index(-1, 3)
        2
        >>> axis_index(5, 2, "axis2")
        Traceback (most recent call last):
        ...
        dtensor_np.errors.AxisError: axis2: axis 5 is out of bounds for array of dimension 2
        >>> axis_index(1.5, 2)
        Traceback (most recent call last):
        ...
        TypeError: axis must be an int, got 1.5 ('float' object cannot be interpreted as an integer)
    """
    if isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"{argname or 'axis'} must be {expected}, got {axis!r} (a bool is not an axis)")
    try:
        index = operator.index(axis)
    except TypeError as e:
        raise TypeError(f"{argname or 'axis'} must be {expected}, got {axis!r} ({e})") from None
    if not -ndim <= index < ndim:
        raise AxisError(index, ndim, argname)
    return index % ndim


def axis_tuple(axis: Any, ndim: int, argname: Optional[str] = None, *, lists: bool = False) -> tuple[int, ...]:
    """An int or a tuple of ints (a list too, with ``lists``) as dims in ``[0, ndim)``, in the order given.

    Each entry is checked by :func:`axis_index`; a repeated dim is a ``ShardingError``
    (a ``ValueError``, as NumPy raises).  NumPy's reductions refuse a list
    (``'list' object cannot be interpreted as an integer``); ``transpose``,
    ``moveaxis`` and ``expand_dims`` take one.

    Example:
        >>> axis_tuple((0, -1), 3), axis_tuple(1, 3)
        ((0, 2), (1,))
        >>> axis_tuple([0], 2)
        Traceback (most recent call last):
        ...
        TypeError: axis must be an int or a tuple of ints, got [0] ('list' object cannot be interpreted as an integer)
    """
    if isinstance(axis, (tuple, list) if lists else tuple):
        dims = tuple(axis_index(a, ndim, argname) for a in axis)
    else:
        dims = (axis_index(axis, ndim, argname, expected="an int or a tuple of ints"),)
    if len(set(dims)) != len(dims):
        raise ShardingError(f"duplicate value in {argname or 'axis'} {axis!r}")
    return dims


def normalize_axes(axis: Any, ndim: int, *, legacy_0d: bool = False) -> Optional[tuple[int, ...]]:
    """``axis`` (None, an int or a tuple of ints) as a sorted tuple of dims; None means all.

    With ``legacy_0d``, a 0-d array takes the int axis 0 or -1 and nothing is
    reduced, as NumPy's ``sum``, ``max``, ``squeeze`` and ``ufunc.reduce`` allow
    (``np.mean`` does not; a tuple is always checked).

    Example:
        >>> normalize_axes((-1, 0), 3), normalize_axes(None, 3), normalize_axes(0, 0, legacy_0d=True)
        ((0, 2), None, ())
    """
    if axis is None:
        return None
    if legacy_0d and ndim == 0 and not isinstance(axis, tuple):
        try:
            axis_index(axis, 1)
        except AxisError:
            raise AxisError(operator.index(axis), 0) from None
        return ()
    return tuple(sorted(axis_tuple(axis, ndim)))


def placements_with(spec: DTensorSpec, updates: Mapping[int, Placement]) -> tuple[Placement, ...]:
    return tuple(updates.get(m, p) for m, p in enumerate(spec.placements))
