"""Running a NumPy call on DTensors: propagate, redistribute, compute shard by shard, wrap.

The rule for the callable decides (purely, cached) the specs the inputs must
have and the output specs; the inputs are redistributed; every rank held
here runs the NumPy (or CuPy) function on its local shards; the results are
wrapped into DTensors.  A call with no rule raises a ShardingError naming the
op, unless the opt-in :func:`replicate_fallback` is active, which gathers the
inputs, computes on full arrays and counts every use.  A call given a key
(:func:`dtensor_np.fast_path.call_key`) leaves its entry in the fast path, so
that the same call again is one dict lookup (:mod:`dtensor_np.fast_path`).
:func:`observing_rules` lets a tool see which rules run (the operation table
of the documentation records them so).

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
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from collectives import memo
from collectives.spmd import note_local_call

from .arrays import as_array
from .errors import ShardingError
from .fast_path import compile_entry, key_fingerprint
from .placements import Replicate
from .propagation import decide, rule_of
from .propagation.registry import OpRule, no_rule_error
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
    "observing_rules",
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
        >>> x = dt.distribute_tensor(np.array([-4.0, 1.0, 9.0]), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> with dt.replicate_fallback() as used:
        ...     y = np.emath.sqrt(x)                # numpy.lib.scimath.sqrt has no rule
        >>> y.full_tensor().tolist(), used["sqrt"]
        ([2j, (1+0j), (3+0j)], 1)
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
        ...     _ = np.lib.stride_tricks.sliding_window_view(x, 2)
        >>> fallback_counts()["sliding_window_view"] >= 1
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


_OBSERVERS: list[Callable[[OpRule], None]] = []


@contextlib.contextmanager
def observing_rules(observer: Callable[[OpRule], None]) -> Iterator[None]:
    """Call ``observer(rule)`` for every call that runs through a rule inside this block.

    A call served by the fast path runs no rule: call ``dt.clear_caches()``
    before a call to see its rules.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones(4), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> seen = []
        >>> dt.clear_caches()
        >>> with observing_rules(lambda rule: seen.append(rule.name)):
        ...     _ = x.sum()
        >>> seen
        ['sum']
    """
    _OBSERVERS.append(observer)
    try:
        yield
    finally:
        _OBSERVERS.remove(observer)


def dispatch(func: Any, args: tuple, kwargs: Mapping[str, Any], fast_key: Optional[tuple] = None) -> Any:
    """``__array_function__`` for DTensors: the rule of ``func``, or the fallback when enabled."""
    rule = rule_of(func)
    if rule is None:
        if _FALLBACK.get():
            return _fallback(func, args, kwargs)
        raise no_rule_error(func)
    return run_rule(rule, args, kwargs, fast_key)


def run_rule(rule: OpRule, args: tuple, kwargs: Mapping[str, Any], fast_key: Optional[tuple] = None) -> Any:
    """Run a call through its rule: bind, decide (cached), redistribute the inputs, compute shard by shard, wrap.

    The results are of the type of the first distributed argument (a ``DTensor``).
    With ``fast_key`` (:func:`dtensor_np.fast_path.call_key` of this call), what
    the call worked out is kept in the fast path under it, so the next call with
    the same key runs its entry instead (:func:`dtensor_np.fast_path.compile_entry`).  A keyed call folds its key's
    fingerprint into the next SPMD agreement (:func:`collectives.spmd.note_local_call`), as its entry will.
    """
    if fast_key is not None:
        note_local_call(key_fingerprint(fast_key))
    try:
        tensors, key = rule.bind(tuple(args), dict(kwargs))
    except TypeError as e:  # a plain array among the static arguments: say what to do instead
        if _NO_STATIC_ARRAY in str(e) and any(_plain_array(a) for a in (*args, *kwargs.values())):
            raise TypeError(_PLAIN_ARRAY) from None
        raise
    for observe in _OBSERVERS:
        observe(rule)
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
    shards = [t.shards if t.spec is target else redistribute_shards(t.shards, t.spec, target)
              for t, target in zip(tensors, decision.inputs)]
    make = getattr(tensors[0], "_result_class", type(tensors[0]))  # a view's result is an owner
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
    made = _results(make, namespace, outs, decision)
    if fast_key is not None:
        compile_entry(fast_key, args, tensors, decision, backend, made, outs, redistribute_shards)
    return made


_NO_STATIC_ARRAY = "got a NumPy array of shape"  # collectives.frozen's words
_PLAIN_ARRAY = ("a plain ndarray cannot be mixed with DTensors in one call; distribute it first, "
                "e.g. dt.distribute_tensor(a, mesh, [dt.Replicate()] * mesh.ndim)")


def _plain_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.ndim > 0


def _results(make: Any, namespace: Any, outputs: tuple[dict[int, Any], ...], decision: Any) -> Any:
    specs = decision.outputs
    if decision.data_dependent:  # replicated results whose shapes come from the values (unique)
        specs = tuple(DTensorSpec(s.mesh, s.placements, TensorMeta(tuple(next(iter(o.values())).shape), s.dtype))
                      for o, s in zip(outputs, specs))
    wrapped = tuple(_wrap(make, namespace, shards, spec) for shards, spec in zip(outputs, specs))
    if not decision.multiple_outputs:
        return wrapped[0]
    return wrapped if decision.result_type is None else decision.result_type(*wrapped)


def _wrap(make: Any, namespace: Any, results: dict[int, Any], spec: DTensorSpec) -> Any:
    results = {r: as_array(x) for r, x in results.items()}
    dtype = next(iter(results.values())).dtype
    return make(results, _with_dtype(spec, np.dtype(dtype)), namespace=namespace)


@memo(maxsize=8192, name="dtensor_np.result_specs")
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
    make = getattr(found[0], "_result_class", type(found[0]))

    def wrap(value: Any) -> Any:
        value = as_array(value)
        if not hasattr(value, "dtype") or not hasattr(value, "shape"):
            return value
        spec = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, TensorMeta(value.shape, value.dtype))
        return make({r: value.copy() for r in ranks}, spec, namespace=found[0].namespace)

    if isinstance(result, tuple):
        return tuple(wrap(v) for v in result)
    return wrap(result)
