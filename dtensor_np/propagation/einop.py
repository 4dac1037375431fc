"""Sharding propagation by einsum notation: ``einop_rule`` and ``pointwise_rule``.

Pure functions from input specs to an :class:`OutputSharding`: either the
output spec, or (when the inputs cannot be used as they are) the input specs
to redistribute to first.  Semantics follow PyTorch's rules:

* a dim sharded on a mesh dim in one input and replicated in another is
  sharded in both (the replicated one is chunked locally);
* a dim sharded on two different mesh dims raises "sharded two different ways";
* two different dims sharded on the same mesh dim: the sharding of the
  larger input is kept and the other dim is replicated;
* ``Partial`` inputs are pending reductions: a linear op (``linearity=True``)
  keeps them when every input is partial on that mesh dim, otherwise they are
  reduced first;
* a dim contracted away (in an input, not in the output) while sharded makes
  the output ``Partial(sum)`` on that mesh dim;
* ``"1"`` marks a broadcast singleton dim, which never carries sharding.

Example:
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
    >>> mesh = DeviceMesh((2,))
    >>> a = DTensorSpec.from_dim_map(mesh, [-1, 0], [], TensorMeta((4, 6), "f4"))
    >>> b = DTensorSpec.from_dim_map(mesh, [0, -1], [], TensorMeta((6, 8), "f4"))
    >>> str(einop_rule("mk,kn->mn", [a, b]).output_spec)
    'P(sum)'
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ..errors import ShardingError
from ..placements import Partial, Placement, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta

__all__ = ["OutputSharding", "einop_rule", "pointwise_rule", "parse_equation"]

_LINEAR_OPS = ("sum", "avg")


@dataclass(frozen=True, slots=True)
class OutputSharding:
    """The result of a propagation rule.

    ``output_spec`` is the output's spec, or None when the inputs must first
    be redistributed to ``redistribute_specs`` (one suggested spec per input).

    Example:
        >>> OutputSharding(None).redistribute_specs is None
        True
    """

    output_spec: Optional[DTensorSpec]
    redistribute_specs: Optional[tuple[DTensorSpec, ...]] = None


def parse_equation(equation: str) -> tuple[list[str], str]:
    """``"mk,kn->mn"`` as ``(["mk", "kn"], "mn")``; an error names what is malformed."""
    if equation.count("->") != 1:
        raise ShardingError(f"einop equation needs exactly one '->', got {equation!r}")
    inputs, output = equation.replace(" ", "").split("->")
    if "," in output:
        raise ShardingError(f"einop_rule supports one output, got {equation!r}")
    return inputs.split(","), output


def _spec(mesh, dim_map: Sequence[int], partials: Mapping[int, str], meta: Optional[TensorMeta]) -> DTensorSpec:
    placements: list[Placement] = [Replicate()] * mesh.ndim
    for m, op in partials.items():
        placements[m] = Partial(op)
    for d, m in enumerate(dim_map):
        if m != -1:
            placements[m] = Shard(d)
    return DTensorSpec(mesh, tuple(placements), meta)


def _local_numel(spec: DTensorSpec) -> int:
    n = 1
    for s in spec.shape:
        n *= s
    return n // max(1, spec.num_shards) if n else 0


def einop_rule(
    equation: str,
    input_specs: Sequence[DTensorSpec],
    *,
    linearity: bool = False,
    enforce_sharding: Optional[Mapping[str, int]] = None,
) -> OutputSharding:
    """Propagate shardings through an op whose data moves like ``equation`` (einsum notation).

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
        >>> mesh = DeviceMesh((2, 2))
        >>> a = DTensorSpec.from_dim_map(mesh, [0, -1], [], TensorMeta((4, 4), "f4"))
        >>> b = DTensorSpec.from_dim_map(mesh, [-1, 1], [], TensorMeta((4, 4), "f4"))
        >>> einop_rule("mk,kn->mn", [a, b]).output_spec.dim_map
        [0, 1]
    """
    input_dims, output_dims = parse_equation(equation)
    specs = tuple(input_specs)
    if len(input_dims) != len(specs):
        raise ShardingError(f"{equation}: expected {len(input_dims)} input specs, got {len(specs)}")
    mesh = specs[0].mesh
    for s in specs:
        if s.mesh != mesh:
            raise ShardingError(f"{equation}: inputs live on different meshes: {mesh} and {s.mesh}")
    enforce = dict(enforce_sharding or {})

    dim_to_sharding: dict[str, int] = {}
    dim_to_size: dict[str, int] = {}
    partial_ops: dict[int, set[str]] = {}
    partial_count: dict[int, int] = {}
    seen: dict[int, list[str]] = {}
    needs_reshard = False

    for dims, spec in zip(input_dims, specs):
        if len(dims) != spec.ndim:
            raise ShardingError(f"{equation}: input {dims!r} has {len(dims)} dims, its spec has {spec.ndim}")
        for m in spec.sums:
            partial_ops.setdefault(m, set()).add(spec.placements[m].reduce_op)  # type: ignore[union-attr]
            partial_count[m] = partial_count.get(m, 0) + 1
            seen.setdefault(m, [])
            if "+" not in seen[m]:
                seen[m].append("+")
        for idx, (dim, mesh_dim) in enumerate(zip(dims, spec.dim_map)):
            if dim == "1":
                if mesh_dim != -1:
                    needs_reshard = True  # a sharded size-1 dim lives on one rank only
                continue
            if dim in enforce:
                if enforce[dim] != mesh_dim:
                    needs_reshard = True
                dim_to_sharding[dim] = enforce[dim]
            elif dim not in dim_to_sharding:
                dim_to_sharding[dim] = mesh_dim
            elif dim_to_sharding[dim] != mesh_dim:
                a, b = dim_to_sharding[dim], mesh_dim
                if a != -1 and b != -1:
                    raise ShardingError(f"{equation}: dim {dim} sharded two different ways: {a} and {b}")
                needs_reshard = True
                dim_to_sharding[dim] = a if a != -1 else b
            size = spec.shape[idx]
            if dim_to_size.setdefault(dim, size) != size:
                raise ShardingError(
                    f"{equation}: dim {dim} has size {dim_to_size[dim]} in one input and {size} in another"
                )
            merged = dim_to_sharding[dim]
            if merged != -1:
                dims_on = seen.setdefault(merged, [])
                if dim not in dims_on:
                    dims_on.append(dim)

    # Pending reductions that can stay pending: linear op, every input partial, one sum-like op.
    # Pending reductions that stay pending: a linear op and one sum-like op on the mesh dim.  Inputs
    # that are not partial there are asked to become partial (a local R -> P), as in the reference.
    kept_partials: dict[int, str] = {}
    for m, ops in partial_ops.items():
        if linearity and len(ops) == 1 and next(iter(ops)) in _LINEAR_OPS:
            kept_partials[m] = next(iter(ops))
            if partial_count[m] != len(specs):
                needs_reshard = True
        else:
            needs_reshard = True

    # A mesh dim asked to shard several dims (or to shard and to hold a pending sum).
    for m, dims_on in seen.items():
        if len(dims_on) <= 1:
            continue
        needs_reshard = True
        real = [d for d in dims_on if d != "+"]
        kept_partials.pop(m, None)  # a pending reduction meets a sharded dim: reduce it (never S -> P)
        if len(real) <= 1:
            continue
        costs = []
        for d in real:
            cost = 0
            for dims, spec in zip(input_dims, specs):
                if d in dims and spec.dim_map[dims.index(d)] == m:
                    cost += _local_numel(spec) * mesh.shape[m]
            costs.append(cost)
        keep = real[costs.index(max(costs))]
        for d in real:
            if d != keep:
                dim_to_sharding[d] = -1

    if needs_reshard:
        suggestions = tuple(
            _spec(mesh, [-1 if d == "1" else dim_to_sharding[d] for d in dims], kept_partials, spec.tensor_meta)
            for dims, spec in zip(input_dims, specs)
        )
        return OutputSharding(None, suggestions)

    out_partials = dict(kept_partials)
    for dim, m in dim_to_sharding.items():
        if m != -1 and dim not in output_dims:
            out_partials[m] = "sum"
    out_map, out_shape = [], []
    for dim in output_dims:
        if dim == "1":
            out_map.append(-1)
            out_shape.append(1)
        else:
            out_map.append(dim_to_sharding[dim])
            out_shape.append(dim_to_size[dim])
    meta = None
    if specs[0].tensor_meta is not None:
        meta = TensorMeta(tuple(out_shape), specs[0].tensor_meta.dtype)
    return OutputSharding(_spec(mesh, out_map, out_partials, meta))


def pointwise_equation(shapes: Sequence[tuple[int, ...]]) -> str:
    """The einop equation of a broadcasting elementwise op over inputs of ``shapes``.

    Example:
        >>> pointwise_equation([(4, 3), (3,), (4, 1)])
        'ab,b,a1->ab'
    """
    letters = string.ascii_lowercase
    max_dim = max(len(s) for s in shapes)
    if max_dim > len(letters):
        raise ShardingError(f"pointwise ops support at most {len(letters)} dims, got {max_dim}")
    singleton = [0] * max_dim
    widest = [1] * max_dim  # the broadcast size of every output dim (0 beats 1, like NumPy)
    for shape in shapes:
        for i, n in enumerate(shape, start=max_dim - len(shape)):
            if n != 1:
                widest[i] = n
    parts = []
    for shape in shapes:
        start = max_dim - len(shape)
        chars = list(letters[start:max_dim])
        for i in range(max_dim):
            if i < start:
                singleton[i] += 1
            elif len(shapes) > 1 and shape[i - start] == 1 and widest[i] != 1:
                singleton[i] += 1  # broadcast against a larger dim: never sharded
                chars[i - start] = "1"
        parts.append("".join(chars))
    out = "".join("1" if singleton[i] == len(shapes) and len(shapes) > 1 else letters[i] for i in range(max_dim))
    return f"{','.join(parts)}->{out}"


def pointwise_rule(
    input_specs: Sequence[DTensorSpec],
    *,
    linearity: bool = False,
    out_spec: Optional[DTensorSpec] = None,
) -> OutputSharding:
    """Propagate shardings through a broadcasting elementwise op.

    ``out_spec`` enforces the output sharding (an in-place or ``out=`` op).

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta
        >>> mesh = DeviceMesh((2,))
        >>> a = DTensorSpec.from_dim_map(mesh, [0, -1], [], TensorMeta((4, 3), "f4"))
        >>> b = DTensorSpec.from_dim_map(mesh, [-1], [], TensorMeta((3,), "f4"))
        >>> pointwise_rule([a, b]).output_spec.dim_map
        [0, -1]
    """
    specs = tuple(input_specs)
    equation = pointwise_equation([s.shape for s in specs])
    enforce: dict[str, int] = {}
    if out_spec is not None:
        out_dims = equation.split("->")[1]
        for dim, m in zip(out_dims, out_spec.dim_map):
            if dim != "1":
                enforce[dim] = m
    return einop_rule(equation, specs, linearity=linearity, enforce_sharding=enforce)
