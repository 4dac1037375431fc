"""``trace``: run a NumPy function once on abstract arrays and record every call as a graph node.

A :class:`Tracer` stands for an array of known shape and dtype but no data.
It implements the NumPy protocols (``__array_ufunc__``, ``__array_function__``,
the operators, and array methods such as ``.T``, ``reshape``, ``sum``,
``astype``), so model code written for NumPy runs unchanged: each call is
recorded as a :class:`~dtensor_np.graph.ir.Node`.  Tracing is abstract, as
``jax.eval_shape`` is: the shapes of a result come from the op's sharding
rule, computed from shapes alone, and its dtype from the same NumPy call on
arrays with every dim of size one, so tracing a matmul of two 10^6 x 10^6
arrays allocates nothing.  A call without a rule runs on placeholder arrays
of the right shape and dtype (zero-strided: no input data, but NumPy
allocates its result).  Shape errors (a mismatch in ``matmul``...) surface at
trace time.

Plain arrays the function closes over become ``constant`` nodes; Python and
NumPy scalars, shapes and axes stay static attributes.  Anything that needs a
value (``if x > 0``, ``float(x)``, ``np.asarray(x)``) raises a TypeError.

Example:
    >>> import numpy as np
    >>> def mlp(params, x):
    ...     h = np.maximum(x @ params["fc1.weight"].T + params["fc1.bias"], 0)
    ...     return h @ params["fc2.weight"].T
    >>> params = {"fc1.weight": ShapeDtype((8, 4), "f4"), "fc1.bias": ShapeDtype((8,), "f4"),
    ...           "fc2.weight": ShapeDtype((4, 8), "f4")}
    >>> g = trace(mlp, params, ShapeDtype((2, 4), "f4"))
    >>> [n.op for n in g.nodes]
    ['transpose', 'matmul', 'add', 'maximum', 'transpose', 'matmul']
    >>> str(g.outputs[0].aval)
    'f32[2,4]'
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Optional, Sequence

import numpy as np
from collectives.device import is_device_array
from numpy.lib.mixins import NDArrayOperatorsMixin

from ..arrays import astype
from ..mesh import DeviceMesh
from ..placements import Replicate
from ..propagation import decide, rule_of
from ..propagation.registry import composite_of
from ..propagation.index_plan import concrete_index
from ..propagation.reorder import DATA_DEPENDENT_SHAPE, data_dependent_call
from ..sharded import SpecArg
from ..spec import DTensorSpec
from .graph import Graph
from .ir import CallParams, Constant, Node, ShapeDtype, Var, bound_method
from .pytree import flatten, leaves_with_paths, path_name, unflatten

__all__ = ["Tracer", "trace", "abstract_eval", "output_avals", "placeholder"]


_ASTYPE: Callable[..., Any] = getattr(np, "astype", astype)


def placeholder(aval: ShapeDtype) -> np.ndarray:
    """A read-only array of ones with ``aval``'s shape and dtype that allocates one element."""
    return np.broadcast_to(np.ones((), aval.dtype), aval.shape)


def abstract_eval(fn: Any, method: str, args: tuple, kwargs: dict) -> Any:
    """Run ``fn`` (or its ufunc ``method``) with every :class:`Var` replaced by a placeholder array."""
    return _call_with(fn, method, args, kwargs, placeholder)


def _call_with(fn: Any, method: str, args: tuple, kwargs: dict, stand_in: Callable[[ShapeDtype], Any]) -> Any:
    leaves, tree = flatten((args, kwargs))
    args, kwargs = unflatten(tree, [stand_in(x.aval) if isinstance(x, Var) else x for x in leaves])
    with np.errstate(all="ignore"):
        return bound_method(fn, method)(*args, **kwargs)


_ONE_RANK = DeviceMesh((1,))


def _by_rule(fn: Any, method: str, args: tuple, kwargs: dict) -> Optional[tuple[tuple[ShapeDtype, ...], str]]:
    """The avals of a call from its sharding rule (shapes) and a call on all-ones-dims arrays (dtypes); None without a rule."""
    rule = rule_of(fn, method)
    if rule is None:
        return None
    leaves, tree = flatten((args, kwargs))
    stand_ins = [SpecArg(DTensorSpec(_ONE_RANK, (Replicate(),), x.aval.meta)) if isinstance(x, Var) else x
                 for x in leaves]
    s_args, s_kwargs = unflatten(tree, stand_ins)
    try:
        tensors, key = rule.bind(tuple(s_args), dict(s_kwargs))
        decision = decide(rule, tuple(t.spec for t in tensors), key)
    except Exception:  # noqa: BLE001 - arguments the rule refuses: NumPy's own call says what is wrong
        return None
    shapes = [spec.shape for spec in decision.outputs]
    dtypes = [spec.dtype for spec in decision.outputs]  # the inputs' dtype: right for ops that only move data
    for stand_in in (_unit, _empty):
        try:
            results, _ = _results(_call_with(fn, method, args, kwargs, stand_in), "")
        except TypeError:  # NumPy refuses the dtypes (or arguments): its own error, at trace time
            raise
        except Exception:  # noqa: BLE001 - a shape these stand-ins lack (a reshape to a fixed size): the rule's dtype
            continue
        if results is not None and len(results) == len(shapes):
            dtypes = [np.asarray(r).dtype for r in results]
        break
    out_kind = "tuple" if decision.multiple_outputs else "array"
    return tuple(ShapeDtype(s, d) for s, d in zip(shapes, dtypes)), out_kind


def _unit(aval: ShapeDtype) -> np.ndarray:
    return np.ones((1,) * aval.ndim, aval.dtype)


def _empty(aval: ShapeDtype) -> np.ndarray:
    return np.empty((0,) * aval.ndim, aval.dtype)


def output_avals(fn: Any, method: str, args: tuple, kwargs: dict) -> tuple[tuple[ShapeDtype, ...], str]:
    """The abstract values of a call's array results and its ``out_kind``; TypeError when it returns none.

    Abstract when the op has a sharding rule (nothing of the results' size is
    allocated); otherwise NumPy runs on placeholder arrays (see the module doc).
    """
    found = _by_rule(fn, method, args, kwargs)
    if found is not None:
        return found
    name = getattr(fn, "__name__", repr(fn))
    results, out_kind = _results(abstract_eval(fn, method, args, kwargs), name)
    if results is None:
        raise TypeError(f"numpy.{name} returns no array here, so it cannot be a graph node")
    return tuple(ShapeDtype.of(r) for r in results), out_kind


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or is_device_array(x)


class _Recorder:
    """The nodes of one trace being built, and the counter of variable ids."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._next_id = 0
        self._constants: dict[int, tuple[Any, Var]] = {}

    def new_var(self, aval: ShapeDtype, name: str | None = None) -> Var:
        var = Var(self._next_id, aval, name)
        self._next_id += 1
        return var

    def lift(self, x: Any) -> Any:
        """A call argument as it goes into a node template: a Var for a tracer or a closed-over array."""
        if isinstance(x, Tracer):
            if x._recorder is not self:
                raise TypeError("a traced array from another trace was used in this one")
            return x._var
        if _is_array(x):
            if x.ndim == 0:
                return x[()] if isinstance(x, np.ndarray) else x.item()
            return self.constant(x)
        return x

    def constant(self, value: Any) -> Var:
        """The variable of a ``constant`` node holding ``value`` (one node per array object)."""
        found = self._constants.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        var = self.new_var(ShapeDtype.of(value))
        self.nodes.append(Node(Constant(value), (), (var,)))
        self._constants[id(value)] = (value, var)
        return var

    def record(self, fn: Any, method: str, args: Sequence[Any], kwargs: dict) -> Any:
        """Record ``fn.method(*args, **kwargs)``; tracers for its array results, or its static result."""
        if "out" in kwargs or method == "at":
            raise TypeError(f"traced arrays are immutable: {getattr(fn, '__name__', fn)} with out= or .at cannot be traced")
        if method == "__call__" and data_dependent_call(fn, tuple(args), kwargs, lambda a: isinstance(a, Tracer)):
            raise TypeError(DATA_DEPENDENT_SHAPE.format(name=getattr(fn, "__name__", fn)))
        leaves, tree = flatten((tuple(args), dict(kwargs)))
        t_args, t_kwargs = unflatten(tree, [self.lift(x) for x in leaves])
        found = _by_rule(fn, method, t_args, t_kwargs)
        if found is None:
            result = abstract_eval(fn, method, t_args, t_kwargs)
            results, out_kind = _results(result, getattr(fn, "__name__", repr(fn)))
            if results is None:
                return result  # a static answer, e.g. np.shape(x)
            avals = tuple(ShapeDtype.of(r) for r in results)
        else:
            avals, out_kind = found
        outputs = tuple(self.new_var(aval) for aval in avals)
        params, inputs = CallParams.of_call(t_args, t_kwargs, method)
        self.nodes.append(Node(fn, inputs, outputs, params, out_kind))
        tracers = [Tracer(v, self) for v in outputs]
        if out_kind == "array":
            return tracers[0]
        return tracers if out_kind == "list" else tuple(tracers)


def _results(result: Any, name: str) -> tuple[Any, str]:
    """(array results, out_kind) of an abstract call; (None, "") when the result holds no array."""
    if isinstance(result, (np.ndarray, np.generic)):
        return [result], "array"
    if type(result) in (tuple, list):
        arrays = [isinstance(r, (np.ndarray, np.generic)) for r in result]
        if result and all(arrays):
            return list(result), "list" if type(result) is list else "tuple"
        if any(arrays):
            raise TypeError(f"numpy.{name} returned a mix of arrays and other values, which cannot be traced")
    leaves, _ = flatten(result)
    if any(isinstance(r, (np.ndarray, np.generic)) for r in leaves):
        raise TypeError(f"numpy.{name} returned nested containers of arrays, which cannot be traced")
    return None, ""


def _method(name: str, doc: str) -> Callable[..., Any]:
    func = getattr(np, name)

    def method(self: Tracer, *args: Any, **kwargs: Any) -> Any:
        return func(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = doc
    return method


class Tracer(NDArrayOperatorsMixin):
    """An abstract array inside ``trace``: shape and dtype known, every NumPy call on it recorded.

    Example:
        >>> g = trace(lambda x: x.T.reshape(-1).astype("f4"), ShapeDtype((2, 3), "f8"))
        >>> [n.op for n in g.nodes], str(g.outputs[0].aval)
        (['transpose', 'reshape', 'astype'], 'f32[6]')
    """

    __slots__ = ("_var", "_recorder")

    def __init__(self, var: Var, recorder: _Recorder) -> None:
        self._var = var
        self._recorder = recorder

    # -- abstract value --------------------------------------------------------
    @property
    def aval(self) -> ShapeDtype:
        return self._var.aval

    @property
    def shape(self) -> tuple[int, ...]:
        return self._var.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self._var.aval.dtype

    @property
    def ndim(self) -> int:
        return self._var.aval.ndim

    @property
    def size(self) -> int:
        return self._var.aval.size

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    # -- NumPy protocols -------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        composite = composite_of(ufunc) if method == "__call__" else None
        if composite is not None:  # a gufunc made of others: recorded as the calls it is made of
            return composite(*inputs, **kwargs)
        return self._recorder.record(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        composite = composite_of(func)
        if composite is not None:  # recorded as the calls it is made of
            return composite(*args, **kwargs)
        return self._recorder.record(func, "__call__", args, kwargs)

    def __getitem__(self, index: Any) -> Any:
        index = concrete_index(index, lambda item: isinstance(item, Tracer))  # masks: static, or a TypeError
        return self._recorder.record(operator.getitem, "__call__", (self, index), {})

    # -- methods: each is the NumPy function of the same name --------------------
    @property
    def T(self) -> Any:
        return np.transpose(self)

    def transpose(self, *axes: Any) -> Any:
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return np.transpose(self, axes or None)

    def reshape(self, *shape: Any, order: str = "C") -> Any:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return np.reshape(self, shape, order=order) if order != "C" else np.reshape(self, shape)

    def flatten(self) -> Any:
        return np.ravel(self)

    def astype(self, dtype: Any) -> Any:
        return self._recorder.record(_ASTYPE, "__call__", (self, dtype), {})

    ravel = _method("ravel", "np.ravel(x)")
    swapaxes = _method("swapaxes", "np.swapaxes(x, axis1, axis2)")
    squeeze = _method("squeeze", "np.squeeze(x, axis)")
    sum = _method("sum", "np.sum(x, ...)")
    mean = _method("mean", "np.mean(x, ...)")
    max = _method("max", "np.max(x, ...)")
    min = _method("min", "np.min(x, ...)")
    prod = _method("prod", "np.prod(x, ...)")
    any = _method("any", "np.any(x, ...)")
    all = _method("all", "np.all(x, ...)")
    std = _method("std", "np.std(x, ...)")
    var = _method("var", "np.var(x, ...)")
    argmax = _method("argmax", "np.argmax(x, ...)")
    argmin = _method("argmin", "np.argmin(x, ...)")
    cumsum = _method("cumsum", "np.cumsum(x, ...)")
    clip = _method("clip", "np.clip(x, a_min, a_max)")
    dot = _method("dot", "np.dot(x, other)")
    round = _method("round", "np.round(x, decimals)")

    # -- no values here ------------------------------------------------------------
    def _no_value(self, what: str) -> Any:
        raise TypeError(
            f"{what} needs the value of a traced array ({self.aval}), which only exists when the graph runs; "
            f"trace code whose control flow does not depend on array values"
        )

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        self._no_value("converting to a NumPy array")

    def __bool__(self) -> bool:
        return self._no_value("bool()")

    def __float__(self) -> float:
        return self._no_value("float()")

    def __int__(self) -> int:
        return self._no_value("int()")

    def __index__(self) -> int:
        return self._no_value("using it as an index")

    def __complex__(self) -> complex:
        return self._no_value("complex()")

    def item(self, *args: Any) -> Any:
        return self._no_value("x.item()")

    def tolist(self) -> Any:
        return self._no_value("x.tolist()")

    def nonzero(self) -> Any:
        return self._no_value("x.nonzero() (its result's shape depends on the values)")

    def __repr__(self) -> str:
        return f"Tracer({self.aval})"


def _arg_names(fn: Callable[..., Any], n: int) -> list[str]:
    """Names for ``n`` positional arguments of ``fn``: its parameter names, else ``arg0``, ``arg1``..."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: list[str] = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}{i}" for i in range(n - len(names))]
    names = names[:n]
    return names + [f"arg{i}" for i in range(len(names), n)]


def trace(fn: Callable[..., Any], *example_args: Any) -> Graph:
    """The graph of ``fn`` called on arrays shaped like ``example_args``.

    ``example_args`` are pytrees (dicts, lists, tuples) of arrays or
    :class:`ShapeDtype`; only their shapes and dtypes are used.  Inputs are
    named by parameter name and dotted path, e.g. ``params.fc1.weight``.

    Example:
        >>> import numpy as np
        >>> g = trace(lambda p, x: {"y": x @ p["w"]}, {"w": np.ones((3, 2))}, ShapeDtype((4, 3), "f8"))
        >>> [v.name for v in g.inputs], g(dict(w=np.ones((3, 2))), np.ones((4, 3)))["y"].shape
        (['p.w', 'x'], (4, 2))
    """
    if not callable(fn):
        raise TypeError(f"trace needs a callable, got {type(fn).__name__}")
    names = _arg_names(fn, len(example_args))
    recorder = _Recorder()
    inputs: list[Var] = []
    keys: list[tuple[int, str]] = []
    traced_args = []
    for i, arg in enumerate(example_args):
        leaves, tree = flatten(arg)
        tracers = []
        seen: set[str] = set()
        for path, leaf in leaves_with_paths(arg):
            dotted = path_name(path)
            if dotted in seen:
                raise TypeError(f"two leaves of argument {names[i]!r} are both named {dotted!r}")
            seen.add(dotted)
            var = recorder.new_var(ShapeDtype.of(leaf), f"{names[i]}.{dotted}" if dotted else names[i])
            inputs.append(var)
            keys.append((i, dotted))
            tracers.append(Tracer(var, recorder))
        traced_args.append(unflatten(tree, tracers))
    result = fn(*traced_args)
    out_leaves, out_tree = flatten(result)
    outputs = []
    for leaf in out_leaves:
        if isinstance(leaf, Tracer):
            outputs.append(recorder.lift(leaf))
        else:
            value = leaf if _is_array(leaf) else np.asarray(leaf)
            if value.dtype.kind == "O":
                raise TypeError(f"a traced function must return arrays, got a {type(leaf).__name__}")
            outputs.append(recorder.constant(value))
    return Graph(tuple(inputs), tuple(recorder.nodes), tuple(outputs), tuple(keys), tuple(names), out_tree)
