"""Making some tensor dims whole on every rank, for functions that need them whole.

``inv`` or ``svd`` work on whole matrices, ``fft`` on whole transform axes:
neither runs on a shard of those *core* dims.  For every mesh dim that shards
a core dim, :func:`whole_plan` moves the sharding to a *free* dim (one the
function does not touch, not sharded yet and at least as long as the mesh
dim; the longest such), which the redistribute planner does with one
``all_to_all`` (the transpose of distributed FFT libraries such as
mpi4py-fft): the work stays spread over the ranks and every rank sends
``(k - 1) / k`` of its shard once.  A mesh dim with no free dim left is
gathered; :func:`gather_blocks` gathers all such mesh dims together with one
``all_gather`` (each rank's block flattened, then put back in place), where
the planner would gather one mesh dim after the other.

:func:`whole_decision` is the decision of such a function: the input moved
as above, the gathered mesh dims gathered inside its program, the function
run on whole core dims, and the outputs placed like the input on every dim
that is not core (those keep their index in every output).  A function that
may fail on some values (``inv`` of a singular matrix raises
``LinAlgError``) agrees on the outcome across ranks when they hold different
data, so every rank raises, not only the one holding the bad matrix
(``backend.all_true``: one 4-byte ``Allreduce`` under MPI, not counted by
``comm_counter``).

Example:
    >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
    >>> mesh = DeviceMesh((2, 2))
    >>> spec = DTensorSpec(mesh, (Shard(1), Shard(2)), TensorMeta((8, 4, 4), "f8"))
    >>> moved, gathered = whole_plan(spec, (1, 2))
    >>> str(moved), gathered          # mesh dim 0 moves to dim 0; mesh dim 1 is gathered
    ('S(0)S(2)', (1,))
"""

from __future__ import annotations

import math
from typing import Any, Callable, Collection, Optional, Sequence

import numpy as np

from collectives import array_module

from ..placements import Partial, Replicate, Shard
from ..spec import DTensorSpec, TensorMeta
from .common import partial_free, replicate_mesh_dims, single_sharding
from .registry import Decision

__all__ = ["whole_plan", "without_trivial_shards", "gather_blocks", "whole_decision", "run_agreeing", "LINEAR_REDUCE_OPS"]

LINEAR_REDUCE_OPS = ("sum", "avg")
"""Pending reductions a linear function carries through (``f(a + b) = f(a) + f(b)``)."""

Shards = dict[int, Any]


def without_trivial_shards(spec: DTensorSpec) -> DTensorSpec:
    """``spec`` with shards on size-1 mesh dims made ``Replicate`` (their one rank holds the whole dim already)."""
    return replicate_mesh_dims(spec, [m for m, p in enumerate(spec.placements) if isinstance(p, Shard) and spec.mesh.shape[m] == 1])


def whole_plan(spec: DTensorSpec, core: Collection[int], *, move: bool = True) -> tuple[DTensorSpec, tuple[int, ...]]:
    """``spec`` with the sharding of the ``core`` dims moved to free dims, and the mesh dims left to gather.

    ``spec`` shards every tensor dim on at most one mesh dim
    (:func:`~dtensor_np.propagation.common.single_sharding`).  A mesh dim of
    size 1 becomes ``Replicate`` (its one rank holds everything already);
    with ``move=False`` every other one is gathered.

    Example:
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
        >>> spec = DTensorSpec(DeviceMesh((4,)), (Shard(1),), TensorMeta((3, 8), "f8"))
        >>> whole_plan(spec, (1,))[1]      # dim 0 is shorter than the mesh dim: gather
        (0,)
    """
    placements = list(spec.placements)
    taken = {p.dim for p in placements if isinstance(p, Shard)}
    gathered = []
    for m, p in enumerate(placements):
        if not (isinstance(p, Shard) and p.dim in core):
            continue
        k = spec.mesh.shape[m]
        if k == 1:
            placements[m] = Replicate()
            continue
        free = [d for d in range(spec.ndim) if d not in core and d not in taken and spec.shape[d] >= k] if move else []
        if free:
            d = max(free, key=lambda d: (spec.shape[d], -d))
            placements[m] = Shard(d)
            taken.add(d)
        else:
            gathered.append(m)
    return DTensorSpec(spec.mesh, tuple(placements), spec.tensor_meta), tuple(gathered)


def gather_blocks(backend: Any, spec: DTensorSpec, shards: Shards, mesh_dims: Sequence[int]) -> Shards:
    """Gather every tensor dim sharded on ``mesh_dims`` with one ``all_gather`` (over those mesh dims together).

    Each rank sends its block flattened; every member of a group receives the
    group's blocks and puts each at its offset.  Bytes received per rank: the
    whole of the gathered dims (``k - 1`` blocks of a group of ``k``).

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend
        >>> from dtensor_np import DeviceMesh, DTensorSpec, TensorMeta, Shard
        >>> spec = DTensorSpec(DeviceMesh((2, 2)), (Shard(0), Shard(1)), TensorMeta((3, 3), "i8"))
        >>> full = np.arange(9).reshape(3, 3)
        >>> shards = {r: full[spec.local_index(r)] for r in range(4)}
        >>> out = gather_blocks(SimulatedBackend(4), spec, shards, (0, 1))
        >>> all((out[r] == full).all() for r in range(4))
        True
    """
    if not mesh_dims:
        return shards
    mesh = spec.mesh
    target = replicate_mesh_dims(spec, mesh_dims)
    groups = mesh.groups(tuple(sorted(mesh_dims)))
    blocks = {r: spec.local_block(r) for r in mesh.all_ranks}
    sizes = {r: math.prod(shape) for r, (shape, _) in blocks.items()}
    flat = {r: x.reshape(-1) for r, x in shards.items()}
    gathered = backend.all_gather(flat, groups, axis=0, in_sizes=sizes)
    group_of = {r: g for g in groups for r in g}
    out: Shards = {}
    for r, buffer in gathered.items():
        shape, origin = target.local_block(r)
        whole = array_module(buffer).empty(shape, buffer.dtype)
        start = 0
        for member in group_of[r]:
            member_shape, member_offset = blocks[member]
            index = tuple(slice(o - t, o - t + n) for o, t, n in zip(member_offset, origin, member_shape))
            whole[index] = buffer[start : start + sizes[member]].reshape(member_shape)
            start += sizes[member]
        out[r] = whole
    return out


def run_agreeing(backend: Any, shards: Sequence[Shards], local: Callable[..., Any], failure: Optional[str], agree: bool) -> Shards:
    """``local(rank, *arrays)`` on every held rank; with ``agree``, a ``LinAlgError`` on any rank raises on all.

    ``failure`` is NumPy's message for the error (the same on every rank).
    """
    results: Shards = {}
    failed: Optional[BaseException] = None
    for r in backend.ranks:
        try:
            results[r] = local(r, *[s[r] for s in shards])
        except np.linalg.LinAlgError as e:
            if not agree:
                raise
            failed = e
    if agree and not backend.all_true({r: failed is None for r in backend.ranks}):
        raise np.linalg.LinAlgError(failure) from failed
    return results


def split_outputs(results: Shards, count: Optional[int]) -> Any:
    """``{rank: tuple}`` as a tuple of ``{rank: array}`` (``count`` outputs), or unchanged when ``count`` is None."""
    if count is None:
        return results
    return tuple({r: res[i] for r, res in results.items()} for i in range(count))


def whole_decision(
    spec: DTensorSpec,
    core: Collection[int],
    outputs: Sequence[TensorMeta],
    local: Callable[[int, Any], Any],
    *,
    multiple: bool = False,
    result_type: Optional[Callable[..., tuple]] = None,
    linear: bool = False,
    failure: Optional[str] = None,
) -> Decision:
    """The decision of a function that needs the ``core`` dims of its one input whole.

    ``outputs`` are the global metas of the results (``multiple``: a tuple of
    them, of ``result_type``); every non-core sharded dim keeps its index in
    every output.  ``linear``: pending sums and averages flow through
    (others are reduced first).  ``failure``: NumPy's ``LinAlgError``
    message when some values make the function fail.
    """
    spec = single_sharding(spec)
    spec = partial_free(spec, (lambda m, p: p.reduce_op in LINEAR_REDUCE_OPS) if linear else (lambda m, p: False))
    moved, gathered = whole_plan(spec, set(core))
    whole = replicate_mesh_dims(moved, gathered)
    outs = tuple(DTensorSpec(spec.mesh, whole.placements, meta) for meta in outputs)
    agree = failure is not None and any(isinstance(p, (Shard, Partial)) for p in whole.placements)
    if not gathered and not agree:
        return Decision((moved,), outs, local, multiple_outputs=multiple, result_type=result_type)
    count = len(outs) if multiple else None

    def program(backend: Any, shards: Shards) -> Any:
        shards = gather_blocks(backend, moved, shards, gathered)
        return split_outputs(run_agreeing(backend, [shards], local, failure, agree), count)

    return Decision((moved,), outs, None, multiple_outputs=multiple, program=program, result_type=result_type)
