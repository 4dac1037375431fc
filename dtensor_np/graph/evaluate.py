"""Running an unsharded graph on full arrays, and matching call arguments to graph inputs.

Arguments are matched to inputs by position and dotted path, so a flat
parameter dict (``{"fc1.weight": w}``) and a nested one
(``{"fc1": {"weight": w}}``) both fit a graph traced with either.

Example:
    >>> import numpy as np
    >>> from dtensor_np.graph import trace
    >>> g = trace(lambda p, x: x @ p["fc"]["weight"], {"fc": {"weight": np.ones((2, 3))}}, np.ones((1, 2)))
    >>> evaluate(g, {"fc.weight": np.full((2, 3), 2.0)}, np.ones((1, 2))).tolist()
    [[4.0, 4.0, 4.0]]
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

import numpy as np

from collectives import array_module, memo

from .ir import Constant, Input, ShapeDtype, Var, bound_method
from .pytree import flatten, leaves_with_paths, path_name, unflatten

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["evaluate", "bind_inputs", "check_aval", "module_of", "constant_value", "last_uses"]


def bind_inputs(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """The leaf of ``args`` that feeds every graph input, in ``graph.inputs`` order; TypeError on a mismatch."""
    if len(args) != len(graph.arg_names):
        raise TypeError(
            f"the graph takes {len(graph.arg_names)} arguments ({', '.join(graph.arg_names)}), got {len(args)}"
        )
    provided: dict[tuple[int, str], Any] = {}
    for i, arg in enumerate(args):
        if type(arg) is dict and all(type(k) is str and not _is_container(v) for k, v in arg.items()):
            provided.update(((i, k), v) for k, v in arg.items())  # a flat dict: its keys are the paths
        else:
            provided.update(((i, path_name(p)), leaf) for p, leaf in leaves_with_paths(arg))
    names = dict(zip(graph.input_keys, graph.inputs))
    missing = [str(names[k]) for k in graph.input_keys if k not in provided]
    unexpected = [
        f"{graph.arg_names[i]}.{p}" if p else graph.arg_names[i] for i, p in provided if (i, p) not in names
    ]
    if missing or unexpected:
        raise TypeError(
            f"the arguments do not match the graph's inputs: expected {[str(v) for v in graph.inputs]}; "
            f"missing {missing}, unexpected {unexpected}"
        )
    return [provided[k] for k in graph.input_keys]


def _is_container(x: Any) -> bool:
    """True for what a pytree walks into (dict, list, tuple, None) rather than holds as a leaf."""
    return x is None or type(x) in (dict, list, tuple)


def check_aval(var: Var, value: Any, expected: ShapeDtype | None = None) -> None:
    """TypeError unless ``value`` has the shape and dtype ``expected`` (default: the variable's)."""
    expected = var.aval if expected is None else expected
    if type(value) is np.ndarray and value.shape == expected.shape and value.dtype == expected.dtype:
        return  # the common case, without building a ShapeDtype
    got = ShapeDtype.of(value)
    if got != expected:
        raise TypeError(f"input {var}: expected an array {expected}, got {got}")


def module_of(arrays: Iterable[Any]) -> ModuleType:
    """The array library (``numpy`` or ``cupy``) of the first array among ``arrays``; numpy when none."""
    for x in arrays:
        if hasattr(x, "dtype") and hasattr(x, "shape"):
            return array_module(x)
    return np


def constant_value(constant: Constant, xp: ModuleType) -> Any:
    """A constant's array in the array library ``xp`` (the library of the graph's inputs)."""
    return constant.value if xp is np else xp.asarray(constant.value)


def _direct_call(node: Any) -> Optional[Callable[[list[Any]], Any]]:
    """``values -> result`` of a node whose inputs are whole positional or keyword arguments, bound once.

    Static containers (a shape, axes) are passed as they are.  None for
    anything else (an input inside a list or tuple argument), which
    :meth:`Node.call` binds call by call.
    """
    fn = bound_method(node.fn, node.method)
    params = node.params
    if params is None:
        return lambda values: fn(*values)
    args, kwargs = params.args, dict(params.kwargs)
    if any(_is_container(a) and any(isinstance(x, Input) for x in flatten(a)[0]) for a in (*args, *kwargs.values())):
        return None
    slots = [(i, a.index) for i, a in enumerate(args) if isinstance(a, Input)]
    kw_slots = [(k, v.index) for k, v in kwargs.items() if isinstance(v, Input)]
    template = list(args)

    def call(values: list[Any]) -> Any:
        full = template.copy()
        for i, j in slots:
            full[i] = values[j]
        if kw_slots:
            kw = dict(kwargs)
            for k, j in kw_slots:
                kw[k] = values[j]
            return fn(*full, **kw)
        return fn(*full, **kwargs)

    return call


def last_uses(steps: Sequence[tuple[Sequence[int], Sequence[int]]], keep: Iterable[int]) -> tuple[tuple[int, ...], ...]:
    """For every step ``(input ids, output ids)``, the ids no later step reads: what a runner drops after it.

    An output nothing reads is dropped right after the step that makes it;
    the ids in ``keep`` (the graph's outputs) are never dropped.

    Example:
        >>> last_uses([((0,), (1,)), ((1, 0), (2, 3)), ((2,), (4,))], keep=(4,))
        ((), (0, 1, 3), (2,))
    """
    keep = set(keep)
    last: dict[int, int] = {}
    for i, (ins, outs) in enumerate(steps):
        for v in outs:
            last.setdefault(v, i)
        for v in ins:
            last[v] = i
    dead: list[list[int]] = [[] for _ in steps]
    for v, i in last.items():
        if v not in keep:
            dead[i].append(v)
    return tuple(tuple(sorted(d)) for d in dead)


@memo(maxsize=256, name="dtensor_np.graph_steps")
def _steps(graph: Graph) -> tuple[tuple[Any, ...], ...]:
    """Each node as ``(node, input ids, output ids, call or None, several outputs)``, worked out once per graph."""
    ios = [(tuple(v.id for v in node.inputs), tuple(v.id for v in node.outputs)) for node in graph.nodes]
    dead = last_uses(ios, (v.id for v in graph.outputs))
    return tuple(
        (node, ins, outs, None if isinstance(node.fn, Constant) else (_direct_call(node) or node.call),
         node.out_kind != "array", drop)
        for node, (ins, outs), drop in zip(graph.nodes, ios, dead)
    )


def evaluate(graph: Graph, *args: Any) -> Any:
    """The outputs of ``graph`` on full arrays (the pytree the traced function returned)."""
    values = bind_inputs(graph, args)
    for var, value in zip(graph.inputs, values):
        check_aval(var, value)
    xp = module_of(values)
    env: dict[int, Any] = {v.id: x for v, x in zip(graph.inputs, values)}
    for node, ins, outs, call, several, drop in _steps(graph):
        if call is None:
            env[outs[0]] = constant_value(node.fn, xp)
        elif several:
            env.update(zip(outs, tuple(call([env[i] for i in ins]))))
        else:
            env[outs[0]] = call([env[i] for i in ins])
        for i in drop:  # values nothing reads any more are freed as the graph runs
            del env[i]
    return unflatten(graph.out_tree, [env[v.id] for v in graph.outputs])
