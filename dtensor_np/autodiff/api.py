"""``value_and_grad``, ``grad`` and ``vjp`` on NumPy functions, as in JAX: on plain arrays or on DTensors.

The function is traced on the arguments' shapes and dtypes (abstract: no
data), differentiated (:func:`~dtensor_np.autodiff.grad_graph`) and run.  On
plain arrays the joint graph runs on them.  When arguments are DTensors the
joint graph is sharded from their specs (``shard_graph``: the forward and the
backward collectives come from the sharding rules, as a parallelized model's
do), every gradient comes back with the placements of its argument
(:func:`~dtensor_np.planner.backward_target`: a ``Shard(0)`` parameter gets a
``Shard(0)`` gradient, reduce-scattered), and the value is a replicated
DTensor.  The traced, differentiated and sharded graph is cached per function
and argument specs, so a training loop traces once.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> loss = lambda w, x: np.mean((x @ w) ** 2)
    >>> w, x = np.ones((3, 1)), np.arange(6.0).reshape(2, 3)
    >>> value, g = dt.value_and_grad(loss)(w, x)
    >>> float(value), g.ravel().tolist()
    (76.5, [36.0, 51.0, 66.0])
    >>> mesh = dt.DeviceMesh((2,))
    >>> xs = dt.distribute_tensor(x, mesh, [dt.Shard(0)])              # the batch, split over ranks
    >>> ws = dt.distribute_tensor(w, mesh, [dt.Replicate()])
    >>> value, gs = dt.value_and_grad(loss)(ws, xs)
    >>> float(value), gs.placements, gs.full_tensor().ravel().tolist()
    (76.5, (Replicate(),), [36.0, 51.0, 66.0])
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

import numpy as np

from collectives import memo

from ..dtensor import DTensor, distribute_tensor
from ..errors import ShardingError
from ..graph.distributed import run_sharded_shards
from ..graph.graph import Graph
from ..graph.ir import ShapeDtype
from ..graph.pytree import TreeDef, flatten, unflatten
from ..graph.tracer import trace
from ..int_tuple import is_integer
from ..passes.pruning import prune
from ..placements import Replicate
from ..planner import backward_target
from ..tensor_parallel.sharding import replicated
from ..tensor_parallel.transform import shard_graph
from .transform import grad_graph

__all__ = ["grad", "value_and_grad", "vjp"]

ArgNums = Union[int, Sequence[int]]


def _argnums(argnums: ArgNums) -> tuple[int, ...]:
    """``argnums`` as a tuple of distinct ints (as JAX takes it); anything else a TypeError, a repeat a
    ShardingError, before anything is traced."""
    items = (argnums,) if isinstance(argnums, (int, np.integer)) else argnums
    if not isinstance(items, (tuple, list)) or not items or not all(is_integer(a) for a in items):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    nums = tuple(int(a) for a in items)
    if len(set(nums)) != len(nums):
        raise ShardingError(f"expected distinct argnums, got {argnums!r}")
    return nums


def _abstract(leaf: Any) -> Any:
    return ShapeDtype.of(leaf) if hasattr(leaf, "shape") and hasattr(leaf, "dtype") else leaf


@memo(maxsize=128, name="dtensor_np.autodiff_joint_graphs")
def _joint(fn: Callable[..., Any], trees: tuple[TreeDef, ...], avals: tuple[tuple[Any, ...], ...],
           argnums: tuple[int, ...], seeds: bool, has_aux: bool) -> Graph:
    """The traced and differentiated graph of ``fn`` for arguments of these structures and abstract values."""
    example = [unflatten(tree, leaves) for tree, leaves in zip(trees, avals)]
    primals = example[:-1] if seeds else example  # the last argument of a VJP is the seed
    return prune(grad_graph(trace(fn, *primals), argnums, seeds=seeds, differentiated=(0,) if has_aux else None))


@memo(maxsize=128, name="dtensor_np.autodiff_sharded_graphs")
def _sharded(joint: Graph, input_specs: tuple[Any, ...], grad_of: tuple[int, ...]) -> Graph:
    """The joint graph sharded from its inputs' specs; the gradients end in their inputs' backward placements."""
    mesh = input_specs[0].mesh
    n_values = len(joint.outputs) - len(grad_of)
    outputs = [replicated(mesh, v.aval.meta) for v in joint.outputs[:n_values]]
    outputs += [backward_target(input_specs[i]) for i in grad_of]
    return shard_graph(joint, input_specs, local_args=tuple(range(len(joint.arg_names))), output_specs=outputs)


def _run(fn: Callable[..., Any], args: Sequence[Any], argnums: tuple[int, ...], seeds: bool,
         has_aux: bool = False) -> tuple[Any, Any]:
    """``(value, gradients)``: the joint graph of ``fn`` run on ``args`` (the last one the seed when ``seeds``)."""
    flat = [flatten(a) for a in args]
    trees = tuple(tree for _, tree in flat)
    avals = tuple(tuple(_abstract(x) for x in leaves) for leaves, _ in flat)
    primal_count = len(args) - 1 if seeds else len(args)
    for a in argnums:
        if not 0 <= a < primal_count:
            raise TypeError(f"argnums {argnums}: the function takes {primal_count} arguments")
    joint = _joint(fn, trees, avals, argnums, seeds, has_aux)
    leaves_all = [x for leaves, _ in flat for x in leaves]
    meshes = {x.mesh for x in leaves_all if isinstance(x, DTensor)}
    if not meshes:
        return joint(*args)
    if len(meshes) > 1:
        raise ShardingError(f"the arguments are DTensors on different meshes: {sorted(map(repr, meshes))}")
    (mesh,) = meshes
    placed = [unflatten(tree, [_as_dtensor(x, mesh) for x in leaves]) for leaves, tree in flat]
    tensors = [x for arg in placed for x in flatten(arg)[0]]
    specs = tuple(x.spec for x in tensors)
    grad_of = tuple(i for i, (arg, _) in enumerate(joint.input_keys) if arg in argnums)
    sharded = _sharded(joint, specs, grad_of)
    local = [unflatten(tree, [x.to_local() for x in flatten(arg)[0]]) for arg, tree in zip(placed, trees)]
    shards = run_sharded_shards(sharded, *local)
    out_specs = sharded.sharding.outputs  # type: ignore[union-attr]
    results = [DTensor(s, spec) for s, spec in zip(shards, out_specs)]
    return unflatten(sharded.out_tree, results)


def _as_dtensor(x: Any, mesh: Any) -> DTensor:
    """A leaf as a DTensor on ``mesh``: DTensors as they are, anything else replicated (every rank passes the same)."""
    if isinstance(x, DTensor):
        return x
    return distribute_tensor(np.asarray(x), mesh, [Replicate()] * mesh.ndim, src_data_rank=None)


def _structured(grads: tuple[Any, ...], args: Sequence[Any], argnums: tuple[int, ...]) -> Any:
    """The flat gradients in the structure of the differentiated arguments (one, or a tuple for several argnums)."""
    out, k = [], 0
    for a in argnums:
        leaves, tree = flatten(args[a])
        out.append(unflatten(tree, list(grads[k:k + len(leaves)])))
        k += len(leaves)
    return out[0] if len(out) == 1 else tuple(out)


def value_and_grad(fn: Callable[..., Any], argnums: ArgNums = 0, has_aux: bool = False) -> Callable[..., Any]:
    """A function returning ``(fn(*args), gradient of fn w.r.t. args[argnums])`` (``fn`` returns a scalar).

    With ``has_aux``, ``fn`` returns ``(scalar, aux)`` and the value is that pair.
    Gradients have the structure (and, for DTensors, the placements) of their arguments.

    Example:
        >>> import numpy as np
        >>> v, g = value_and_grad(lambda x: np.sum(x ** 2))(np.array([1.0, 3.0]))
        >>> float(v), g.tolist()
        (10.0, [2.0, 6.0])
    """
    nums = _argnums(argnums)

    def wrapped(*args: Any) -> Any:
        value, grads = _run(fn, args, nums, seeds=False, has_aux=has_aux)  # the aux gets no cotangent
        if has_aux:
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                raise TypeError(f"has_aux=True: expected the function to return a pair (scalar output, aux), "
                                f"got {type(value).__name__}")
            value = tuple(value)
        _check_scalar(value[0] if has_aux else value)
        return value, _structured(grads, args, nums)

    return wrapped


def grad(fn: Callable[..., Any], argnums: ArgNums = 0, has_aux: bool = False) -> Callable[..., Any]:
    """A function returning the gradient of the scalar ``fn`` w.r.t. ``args[argnums]`` (and ``aux`` with ``has_aux``).

    Example:
        >>> import numpy as np
        >>> grad(lambda x: np.sum(x ** 2))(np.array([1.0, 3.0])).tolist()
        [2.0, 6.0]
    """
    both = value_and_grad(fn, argnums, has_aux)

    def wrapped(*args: Any) -> Any:
        value, grads = both(*args)
        return (grads, value[1]) if has_aux else grads

    return wrapped


def vjp(fn: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``(fn(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` returns the cotangent of every primal (a tuple).

    The forward pass runs again inside ``vjp_fn`` (its values are not kept).

    Example:
        >>> import numpy as np
        >>> y, back = vjp(lambda x: 2 * x, np.array([1.0, 3.0]))
        >>> y.tolist(), back(np.ones(2))[0].tolist()
        ([2.0, 6.0], [2.0, 2.0])
    """
    nums = tuple(range(len(primals)))
    out = fn(*primals)

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        _, grads = _run(fn, (*primals, cotangent), nums, seeds=True)
        structured = _structured(grads, primals, nums)
        return structured if isinstance(structured, tuple) and len(nums) > 1 else (structured,)

    return out, vjp_fn


def _check_scalar(value: Any) -> None:
    if not hasattr(value, "shape") and not isinstance(value, (float, int, np.number)) or isinstance(value, bool):
        raise TypeError(f"grad needs a function returning a scalar, got {type(value).__name__}")
    if getattr(value, "shape", ()) != ():
        raise TypeError(f"grad needs a function returning a scalar, got an array of shape {value.shape}")
    dtype = getattr(value, "dtype", None)
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise TypeError(f"grad needs a function returning a float scalar, got dtype {dtype}")
