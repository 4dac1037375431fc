"""The table of sharding rules: one :class:`OpRule` per NumPy function or ufunc.

An ``OpRule`` turns a call into (the distributed arguments, a hashable key of
everything else) with ``bind``, and turns input specs plus that key into a
:class:`Decision` with ``decide``: the specs the inputs must have, the
output specs, and the function each rank runs on its local shards.  Both are
pure; decisions are cached per (op, input specs, key).

Example:
    >>> import numpy as np
    >>> rule_for(np.add).name
    'add'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional

from collectives import memo, static_key

from ..errors import ShardingError
from ..spec import DTensorSpec

__all__ = [
    "Decision",
    "OpRule",
    "register",
    "rule_for",
    "rule_lookup",
    "no_rule_error",
    "register_refusal",
    "qualified_name",
    "decide",
    "registered_ops",
    "registered_callables",
    "register_composite",
    "composite_of",
    "registered_composites",
]

@dataclass(frozen=True, slots=True)
class Decision:
    """What to do for one call: input specs to redistribute to, output specs, and what the ranks run.

    ``local(rank, *arrays)`` returns the rank's output array (or a tuple when
    ``multiple_outputs``).  An op that must communicate in the middle (a scan
    along a sharded dim, an argmax over ranks) gives a ``program`` instead:
    ``program(backend, *shards)`` takes each input's ``{rank: array}`` for the
    ranks this process holds, may run collectives through ``backend`` (the same
    ones on every rank, its docstring saying which), and returns the output's
    ``{rank: array}`` (a tuple of them when ``multiple_outputs``).  Output
    dtypes are placeholders until the local results exist.  ``result_type``
    (with ``multiple_outputs``) is the tuple type the outputs come back in, a
    namedtuple where NumPy returns one (``EighResult``...); None: a plain tuple.
    ``data_dependent``: the outputs' shapes depend on the values (``unique``):
    the output specs are replicated and their shapes placeholders, which the
    dispatcher replaces with the local results' shapes (eager calls only).
    """

    inputs: tuple[DTensorSpec, ...]
    outputs: tuple[DTensorSpec, ...]
    local: Optional[Callable[..., Any]]
    multiple_outputs: bool = False
    program: Optional[Callable[..., Any]] = None
    result_type: Optional[Callable[..., tuple]] = None
    data_dependent: bool = False


@dataclass(frozen=True, slots=True)
class OpRule:
    """How one NumPy callable is sharded.

    ``bind(args, kwargs) -> (tensor_args, key)`` picks the distributed
    arguments out of a call; ``decide(specs, key) -> Decision`` is pure.
    """

    name: str
    bind: Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]
    decide: Callable[[tuple[DTensorSpec, ...], Any], Decision]


_RULES: dict[Any, OpRule] = {}


def register(*funcs: Any, name: Optional[str] = None) -> Callable[[Callable[[OpRule], OpRule]], Any]:
    """Register one rule for several NumPy callables (used as ``register(np.sum)(rule)``)."""

    def add(rule: OpRule) -> OpRule:
        for f in funcs:
            _RULES[f] = rule
        return rule

    return add


def rule_lookup(func: Any) -> Optional[OpRule]:
    """The rule of a NumPy callable, or None when it has none (one dict lookup).

    Example:
        >>> import numpy as np
        >>> rule_lookup(np.add).name, rule_lookup(np.fft.fftfreq), rule_lookup([])
        ('add', None, None)
    """
    try:
        return _RULES.get(func)
    except TypeError:  # an unhashable "callable"
        return None


_REFUSALS: dict[Any, str] = {}


def register_refusal(func: Any, reason: str) -> None:
    """Say why a NumPy callable takes no DTensor (``np.save``: every rank would write the file): its
    :func:`no_rule_error` gives the reason instead of "no sharding rule".

    Example:
        >>> import numpy as np
        >>> str(no_rule_error(np.save)).startswith("numpy.save takes no DTensor: under MPI every rank")
        True
    """
    _REFUSALS[func] = reason


def qualified_name(func: Any) -> str:
    """``numpy.partition``, ``numpy.linalg.norm``, ``numpy.lib.scimath.sqrt``: the name a user would write.

    Example:
        >>> import numpy as np
        >>> qualified_name(np.emath.sqrt), qualified_name(np.add)
        ('numpy.lib.scimath.sqrt', 'numpy.add')
    """
    module = getattr(func, "__module__", None) or "numpy"
    return f"{module}.{getattr(func, '__name__', repr(func))}"


def no_rule_error(func: Any) -> ShardingError:
    """The ``ShardingError`` that names a callable without a rule and says what to do instead (its reason, for a
    refused one: :func:`register_refusal`)."""
    name = qualified_name(func)
    try:
        reason = _REFUSALS.get(func)
    except TypeError:  # an unhashable callable
        reason = None
    if reason is not None:
        return ShardingError(f"{name} takes no DTensor: {reason}")
    return ShardingError(
        f"no sharding rule for {name}: call it on x.full_tensor() (or x.to_local() shard by shard), "
        f"or opt in to the replicating fallback with dtensor_np.replicate_fallback()"
    )


def rule_for(func: Any) -> OpRule:
    """The rule of a NumPy callable; a ShardingError naming the op when there is none."""
    rule = rule_lookup(func)
    if rule is None:
        raise no_rule_error(func)
    return rule


_COMPOSITES: dict[Any, Callable[..., Any]] = {}


def register_composite(*funcs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``impl`` as the implementation of NumPy functions that are compositions of others (``np.hstack`` is
    ``np.concatenate`` of ``np.atleast_1d``): used as ``@register_composite(np.hstack)``.

    A composite calls only NumPy functions and array methods on its arguments, so the same code runs on DTensors
    (each call through its own rule: the composite's collectives are theirs) and on the tracer's arrays (the
    calls recorded one by one).  A callable with a rule uses its rule.

    Example:
        >>> import numpy as np
        >>> composite_of(np.hstack).__name__
        'hstack'
    """

    def add(impl: Callable[..., Any]) -> Callable[..., Any]:
        for f in funcs:
            if f in _RULES:
                raise ValueError(f"{getattr(f, '__name__', f)} has a sharding rule; expected a callable without one")
            _COMPOSITES[f] = impl
        return impl

    return add


def composite_of(func: Any) -> Optional[Callable[..., Any]]:
    """The composite implementation of a NumPy callable (:func:`register_composite`), or None."""
    try:
        return _COMPOSITES.get(func)
    except TypeError:
        return None


def registered_composites() -> list[Any]:
    """Every NumPy callable with a composite implementation."""
    return list(_COMPOSITES)


def registered_ops() -> list[str]:
    """Names of every NumPy callable with a rule, sorted."""
    return sorted({getattr(f, "__name__", str(f)) for f in _RULES})


def registered_callables() -> list[Any]:
    """Every NumPy callable (function, ufunc) with a rule: the registry's keys.

    Example:
        >>> import numpy as np
        >>> np.add in registered_callables(), np.linalg.matmul in registered_callables()
        (True, True)
    """
    return list(_RULES)


def decide(rule: OpRule, specs: tuple[DTensorSpec, ...], key: Hashable) -> Decision:
    """``rule.decide(specs, key)``, cached on pure values, the key typed (:func:`collectives.static_key`).

    So a key of another type than one decided before (an axis of ``1.0`` or
    ``True`` after ``1``) is decided, and validated, anew.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.ones((4, 3)), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> (tensor,), key = rule_for(np.sum).bind((x,), {"axis": 1})
        >>> str(decide(rule_for(np.sum), (tensor.spec,), key).outputs[0])
        'S(0)'
    """
    typed = static_key(key)
    if typed is None:  # pragma: no cover - rule keys are hashable
        return rule.decide(specs, key)
    return _decide_cached(rule, specs, typed, key)


@memo(maxsize=8192, name="dtensor_np.rule_decisions")
def _decide_cached(rule: OpRule, specs: tuple[DTensorSpec, ...], typed: Hashable, key: Hashable) -> Decision:
    return rule.decide(specs, key)
