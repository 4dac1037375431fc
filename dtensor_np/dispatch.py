"""Running a NumPy call on DTensors: propagate, redistribute, compute shard by shard, wrap.

The rule for the callable decides (purely, cached) the specs the inputs must
have and the output specs; the inputs are redistributed; every rank held
here runs the NumPy (or CuPy) function on its local shards; the results are
wrapped into DTensors.  A call with no rule raises a ShardingError naming the
op, unless the opt-in :func:`replicate_fallback` is active, which gathers the
inputs, computes on full arrays and counts every use.

The fast path.  A call that can be keyed cheaply, its distributed arguments by
their (interned) specs and every other argument by its type and value
(:func:`call_key`: ints, floats, strings, None, dtypes, tuples and slices of
those; a float zero or NaN by its ``repr``, so ``-0.0`` is not ``0.0``), is run
the first time through the rule as above, and what that call worked out is
kept in :data:`FAST_PATH` under the key: where the DTensors sit among the
arguments, the redistribute runners of the inputs (None when an input stays
as it is), the ranks' local function (or the op's program), the result
backend and the output specs, dtypes included.  A repeated call with the same
key is one dict lookup, the local NumPy/CuPy call on each held rank (one
under MPI, every rank when simulated, in one comprehension) and the result
built without ``__init__``.  Anything that cannot be keyed (an array or a list
among the arguments, a DTensor inside a tuple or a keyword, ``out=``) and the
replicating fallback always take the slow path.  ``FAST_PATH`` is an
:class:`~dtensor_np.interning.BoundedCache` (first in, first out beyond its
size); :func:`clear_fast_path` empties it, :func:`fast_path_stats` counts the
entries built (misses) and the calls served from it (hits).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> mesh = dt.DeviceMesh((2,))
    >>> x = dt.distribute_tensor(np.arange(4.0), mesh, [dt.Shard(0)])
    >>> y = np.exp(x) + 1
    >>> str(y.spec), np.allclose(y.full_tensor(), np.exp(np.arange(4.0)) + 1)
    ('S(0)', True)
"""

from __future__ import annotations

import contextlib
import contextvars
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from .arrays import as_array
from .errors import ShardingError
from .interning import BoundedCache
from .placements import Partial, Replicate, Shard
from .propagation import decide, rule_for, rule_of
from .propagation.registry import OpRule
from .sharded import is_sharded
from .redistribute import redistribute_shards
from .runtime import backend_for
from .spec import DTensorSpec, TensorMeta

__all__ = [
    "dispatch",
    "dispatch_ufunc",
    "replicate_fallback",
    "fallback_counts",
    "run_rule",
    "call_key",
    "static_key",
    "fast_builder",
    "remember",
    "hit_counter",
    "register_fast_type",
    "FAST_PATH",
    "clear_fast_path",
    "fast_path_stats",
]

_FALLBACK: contextvars.ContextVar[tuple[dict[str, int], ...]] = contextvars.ContextVar(
    "dtensor_np_replicate_fallback", default=()
)
_FALLBACK_COUNTS: dict[str, int] = {}


@contextlib.contextmanager
def replicate_fallback(enabled: bool = True) -> Iterator[dict[str, int]]:
    """Let ops without a sharding rule run on gathered (replicated) inputs; off by default.

    Yields the count of fallback uses per op name inside this block
    (``fallback_counts()`` keeps the total for the process).

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.array([3.0, 1.0, 2.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.replicate_fallback() as used:
        ...     y = np.diff(x)
        >>> y.full_tensor().tolist(), used["diff"]
        ([-2.0, 1.0], 1)
    """
    used: dict[str, int] = {}
    token = _FALLBACK.set(_FALLBACK.get() + (used,) if enabled else ())
    try:
        yield used
    finally:
        _FALLBACK.reset(token)


def fallback_counts() -> dict[str, int]:
    """How often each op has run through the replicating fallback in this process.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.replicate_fallback():
        ...     _ = np.partition(x, 1)
        >>> fallback_counts()["partition"] >= 1
        True
    """
    return dict(_FALLBACK_COUNTS)


def dispatch_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: Mapping[str, Any],
                   fast_key: Optional[tuple] = None) -> Any:
    """``__array_ufunc__`` for DTensors (``fast_key``: see :func:`run_rule`)."""
    if method == "__call__":
        return dispatch(ufunc, inputs, kwargs, fast_key)
    rule = rule_of(ufunc, method)
    if rule is None:
        raise ShardingError(f"no sharding rule for numpy.{ufunc.__name__}.{method}")
    return run_rule(rule, inputs, kwargs, fast_key)


def dispatch(func: Any, args: tuple, kwargs: Mapping[str, Any], fast_key: Optional[tuple] = None) -> Any:
    """``__array_function__`` for DTensors: the rule of ``func``, or the fallback when enabled."""
    rule = rule_of(func)
    if rule is None:
        if _FALLBACK.get():
            return _fallback(func, args, kwargs)
        rule_for(func)  # raises the ShardingError that names the op
    return run_rule(rule, args, kwargs, fast_key)


def run_rule(rule: OpRule, args: tuple, kwargs: Mapping[str, Any], fast_key: Optional[tuple] = None) -> Any:
    """Run a call through its rule: bind, decide (cached), redistribute the inputs, compute shard by shard, wrap.

    The results are of the type of the first distributed argument (a ``DTensor``).
    With ``fast_key`` (from :func:`call_key` on this call), what the call
    worked out is kept in :data:`FAST_PATH` under it, so the next call with the
    same key runs the returned entry ``entry(args)`` instead; an entry reads
    only the distributed arguments of ``args``, at the positions they have here.
    """
    tensors, key = rule.bind(tuple(args), dict(kwargs))
    mesh = tensors[0].mesh
    for t in tensors[1:]:
        if t.mesh != mesh:
            raise ShardingError(
                f"numpy.{rule.name}: the DTensors live on different meshes, {mesh!r} and {t.mesh!r}; "
                f"redistribute them onto one mesh first"
            )
    specs = tuple(t.spec for t in tensors)
    decision = decide(rule, specs, key)
    backend = backend_for(mesh)
    shards = [_move(t.shards, t.spec, target) for t, target in zip(tensors, decision.inputs)]
    make = type(tensors[0])
    namespace = tensors[0].namespace
    if decision.program is not None:
        produced = decision.program(backend, *shards)
        outs = produced if decision.multiple_outputs else (produced,)
    else:
        results = {r: decision.local(r, *[s[r] for s in shards]) for r in backend.ranks}
        if decision.multiple_outputs:
            n = len(decision.outputs)
            outs = tuple({r: res[i] for r, res in results.items()} for i in range(n))
        else:
            outs = (results,)
    scalars = any(_is_scalar_result(v) for out in outs for v in out.values())
    made = _results(make, namespace, outs, decision)
    if fast_key is not None and not decision.data_dependent:  # a value-dependent shape is never reused
        entry = _compile(args, tensors, decision, backend, made, scalars)
        if entry is not None:
            FAST_PATH.put(fast_key, entry)
            _STATS["misses"] += 1
    return made


def _results(make: Any, namespace: Any, outputs: tuple[dict[int, Any], ...], decision: Any) -> Any:
    specs = decision.outputs
    if decision.data_dependent:  # replicated results whose shapes come from the values (unique)
        specs = tuple(DTensorSpec(s.mesh, s.placements, TensorMeta(tuple(next(iter(o.values())).shape), s.dtype))
                      for o, s in zip(outputs, specs))
    wrapped = tuple(_wrap(make, namespace, shards, spec) for shards, spec in zip(outputs, specs))
    if not decision.multiple_outputs:
        return wrapped[0]
    return wrapped if decision.result_type is None else decision.result_type(*wrapped)


def _move(shards: dict[int, Any], src: DTensorSpec, dst: DTensorSpec) -> dict[int, Any]:
    """Redistribute an input to the spec a rule asked for.

    A rule may ask a sharded input to join a pending sum (``S -> P``), which
    the planner only does from ``Replicate``: such inputs go through it.
    """
    if src == dst:
        return shards
    through = [
        m
        for m, (a, b) in enumerate(zip(src.placements, dst.placements))
        if isinstance(b, Partial) and isinstance(a, Shard) and src.mesh.shape[m] > 1
    ]
    if through:
        middle = DTensorSpec(
            dst.mesh,
            tuple(Replicate() if m in through else p for m, p in enumerate(dst.placements)),
            dst.tensor_meta,
        )
        shards, src = redistribute_shards(shards, src, middle), middle
    return redistribute_shards(shards, src, dst)


def _wrap(make: Any, namespace: Any, results: dict[int, Any], spec: DTensorSpec) -> Any:
    results = {r: as_array(x) for r, x in results.items()}
    dtype = next(iter(results.values())).dtype
    return make(results, _with_dtype(spec, np.dtype(dtype)), namespace=namespace)


@lru_cache(maxsize=8192)
def _with_dtype(spec: DTensorSpec, dtype: np.dtype) -> DTensorSpec:
    if spec.tensor_meta is not None and spec.tensor_meta.dtype == dtype:
        return spec
    return DTensorSpec(spec.mesh, spec.placements, TensorMeta(spec.shape, dtype), spec.shard_order)


def _fallback(func: Any, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    name = getattr(func, "__name__", repr(func))
    found: list[Any] = []

    def gather(x: Any) -> Any:
        if is_sharded(x):
            found.append(x)
            return x.full_tensor()
        if isinstance(x, (list, tuple)):
            return type(x)(gather(v) for v in x)
        return x

    full_args = gather(tuple(args))
    full_kwargs = {k: gather(v) for k, v in kwargs.items()}
    for counts in (_FALLBACK_COUNTS,) + _FALLBACK.get():
        counts[name] = counts.get(name, 0) + 1
    result = func(*full_args, **full_kwargs)
    mesh = found[0].mesh
    ranks = backend_for(mesh).ranks
    make = type(found[0])

    def wrap(value: Any) -> Any:
        value = as_array(value)
        if not hasattr(value, "dtype") or not hasattr(value, "shape"):
            return value
        spec = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta(value.shape, value.dtype))
        return make({r: value.copy() for r in ranks}, spec, namespace=found[0].namespace)

    if isinstance(result, tuple):
        return tuple(wrap(v) for v in result)
    return wrap(result)


# -- the fast path ------------------------------------------------------------------------------

FAST_PATH_SIZE = 8192
FAST_PATH: BoundedCache = BoundedCache(FAST_PATH_SIZE)  # call_key(...) -> entry(args) -> result
_STATS = {"hits": 0, "misses": 0}
_HITS = [0]  # the entries count their calls here (a list item: no global statement on the hot path)
_BUILDERS: dict[type, Callable[[dict, DTensorSpec, Any], Any]] = {}  # class -> build(shards, spec, namespace)
_KEYWORDS = object()  # separates the positional arguments from the keywords in a key
_NO_KEY = object()
_PLAIN = frozenset({int, bool, str, type(None), np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                    np.uint16, np.uint32, np.uint64, np.longlong, np.ulonglong})
_SLICE_ENDS = frozenset({int, type(None)})
_FLOATS = frozenset({float, np.float16, np.float32, np.float64, np.longdouble})


def _is_scalar_result(value: Any) -> bool:
    return isinstance(value, (np.generic, bool, int, float, complex))


def register_fast_type(cls: type, build: Callable[[dict, DTensorSpec, Any], Any]) -> None:
    """Let calls on ``cls`` (exactly: not its subclasses) take the fast path.

    ``cls`` keeps its spec in ``_spec``, its ``{rank: array}`` in ``_shards``
    and its namespace in ``_namespace``; ``build(shards, spec, namespace)`` makes
    a result without copying or checking anything.
    """
    _BUILDERS[cls] = build


def clear_fast_path() -> None:
    """Forget every fast-path entry (the next call of each op takes the slow path again)."""
    FAST_PATH.clear()


def fast_path_stats() -> dict[str, int]:
    """``{"hits", "misses", "entries", "maxsize"}``: calls served from :data:`FAST_PATH`, entries built, held, at most.

    Example:
        >>> sorted(fast_path_stats())
        ['entries', 'hits', 'maxsize', 'misses']
    """
    return {"hits": _HITS[0], "misses": _STATS["misses"], "entries": len(FAST_PATH), "maxsize": FAST_PATH.maxsize}


def _static(value: Any) -> Any:
    """The key item of a static argument, or ``_NO_KEY`` when it has none (then the call takes the slow path)."""
    c = value.__class__
    if c in _PLAIN:
        return (c, value)
    if c in _FLOATS:
        return (c, value if value == value and value != 0 else repr(value))
    if c is tuple:
        items = [_static(v) for v in value]
        return _NO_KEY if _NO_KEY in items else (tuple, *items)
    if c is slice:
        start, stop, step = value.start, value.stop, value.step
        if start.__class__ in _SLICE_ENDS and stop.__class__ in _SLICE_ENDS and step.__class__ in _SLICE_ENDS:
            return (slice, start.__class__, start, stop.__class__, stop, step.__class__, step)
        return _NO_KEY
    if c is complex or c is np.complex64 or c is np.complex128:
        return (c, repr(value))
    if isinstance(value, np.dtype) or c is type or value is Ellipsis:
        return (c, value)
    return _NO_KEY


def static_key(value: Any) -> Any:
    """The fast-path key item of a static argument (an index, a scalar value), or None when it has none."""
    item = _static(value)
    return None if item is _NO_KEY else item


def fast_builder(cls: type) -> Optional[Callable[[dict, DTensorSpec, Any], Any]]:
    """The result builder registered for ``cls`` (see :func:`register_fast_type`), or None."""
    return _BUILDERS.get(cls)


def remember(key: tuple, entry: Callable[..., Any]) -> None:
    """Keep ``entry`` in :data:`FAST_PATH` under ``key`` (an entry built outside :func:`run_rule`: indexing updates)."""
    FAST_PATH.put(key, entry)
    _STATS["misses"] += 1


def hit_counter() -> list[int]:
    """The one-item list an entry increments on every call it serves (what :func:`fast_path_stats` reports)."""
    return _HITS


def call_key(head: Any, args: tuple, kwargs: Optional[Mapping[str, Any]] = None) -> Optional[tuple]:
    """The fast-path key of a call, or None when the call must take the slow path.

    ``head`` names the op (the NumPy function or ufunc, ``(ufunc, method)``
    for a ufunc method, a rule for the indexing calls); DTensors of a
    registered type stand as their specs (interned: hashed and compared by
    identity), every other argument as ``_static`` makes it.
    """
    key = [head]
    append = key.append
    for a in args:
        c = a.__class__
        if c in _BUILDERS:
            append(a._spec)
        elif c in _FLOATS:
            append(c)
            append(a if a == a and a != 0 else repr(a))
        elif c in _PLAIN:
            append(c)
            append(a)
        else:
            item = _static(a)
            if item is _NO_KEY:
                return None
            append(item)
    if kwargs:
        append(_KEYWORDS)
        for name, value in kwargs.items():
            item = _static(value)
            if item is _NO_KEY:
                return None
            append(name)
            append(item)
    return tuple(key)


def _mover(src: DTensorSpec, dst: DTensorSpec) -> Optional[Callable[[Any], Any]]:
    """The runner of :func:`_move` from ``src`` to ``dst``, or None when the input stays as it is."""
    if src is dst:
        return None
    return lambda shards: _move(shards, src, dst)


def _compile(args: tuple, tensors: tuple, decision: Any, backend: Any, made: Any, scalars: bool) -> Any:
    """The fast-path entry of a call just run through its rule, or None when it has none."""
    build = _BUILDERS.get(tensors[0].__class__)
    positions = tuple(i for i, a in enumerate(args) if a.__class__ in _BUILDERS)
    if build is None or len(positions) != len(tensors) or any(args[p] is not t for p, t in zip(positions, tensors)):
        return None
    outputs = made if decision.multiple_outputs else (made,)
    if any(o.__class__ is not tensors[0].__class__ for o in outputs):
        return None
    specs = tuple(o._spec for o in outputs)
    moves = tuple(_mover(t._spec, dst) for t, dst in zip(tensors, decision.inputs))
    return _entry(positions, moves, decision, backend, specs, build, scalars)


def _entry(positions: tuple[int, ...], moves: tuple, decision: Any, backend: Any, specs: tuple,
           build: Any, scalars: bool) -> Callable[[tuple], Any]:
    """``entry(args) -> result``: the call with every decision made (see the module doc)."""
    ranks = tuple(backend.ranks)
    local = decision.local
    first = positions[0]
    hits = _HITS
    if decision.program is None and not decision.multiple_outputs and not scalars and not any(moves):
        (spec,) = specs
        if len(ranks) == 1:
            (r,) = ranks
            if len(positions) == 1:
                def one(args: tuple) -> Any:
                    hits[0] += 1
                    a = args[first]
                    return build({r: local(r, a._shards[r])}, spec, a._namespace)
                return one
            if len(positions) == 2:
                second = positions[1]

                def two(args: tuple) -> Any:
                    hits[0] += 1
                    a = args[first]
                    return build({r: local(r, a._shards[r], args[second]._shards[r])}, spec, a._namespace)
                return two
        elif len(positions) <= 2:  # simulated: every rank in one comprehension
            second = positions[-1]

            def each(args: tuple) -> Any:
                hits[0] += 1
                a = args[first]
                s = a._shards
                if second == first:
                    made = {r: local(r, s[r]) for r in ranks}
                else:
                    t = args[second]._shards
                    made = {r: local(r, s[r], t[r]) for r in ranks}
                return build(made, spec, a._namespace)
            return each
    program = decision.program
    multiple = decision.multiple_outputs
    n = len(specs)
    result_type = decision.result_type

    def general(args: tuple) -> Any:
        hits[0] += 1
        shards = [args[p]._shards for p in positions]
        shards = [s if m is None else m(s) for s, m in zip(shards, moves)]
        if program is not None:
            produced = program(backend, *shards)
            outs = produced if multiple else (produced,)
        elif multiple:
            results = {r: local(r, *[s[r] for s in shards]) for r in ranks}
            outs = tuple({r: res[i] for r, res in results.items()} for i in range(n))
        else:
            outs = ({r: local(r, *[s[r] for s in shards]) for r in ranks},)
        if scalars:
            outs = tuple({r: as_array(v) for r, v in out.items()} for out in outs)
        namespace = args[first]._namespace
        made = tuple(build(out, spec, namespace) for out, spec in zip(outs, specs))
        if not multiple:
            return made[0]
        return made if result_type is None else result_type(*made)

    return general
