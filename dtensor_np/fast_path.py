"""The dispatch fast path: a repeated NumPy call on DTensors served by one dict lookup.

A call that can be keyed cheaply (:func:`call_key`: its DTensors by their
interned specs, every other argument by its type and value, as
:func:`collectives.static_key` keys it) runs the first time through its
sharding rule (:func:`dtensor_np.dispatch.run_rule`), which then keeps what
that call worked out in :data:`FAST_PATH` under the key (:func:`compile_entry`):
where the DTensors sit among the arguments, the redistribute runners of the
inputs (None where an input stays as it is), the ranks' local function (or the
op's program), the result's builder and the output specs, dtypes included.  A
repeated call with the same key is one dict lookup, the local NumPy/CuPy call
on each held rank (one under MPI, every rank when simulated, in one
comprehension) and the result built without ``__init__``.

:func:`call_key` is the only place that builds a key: the NumPy protocols
(``__array_ufunc__``, ``__array_function__``), the operators, ``x.T``,
``x[i]`` and ``x[i] = v`` all call it, and the entries are built only by
:func:`compile_entry`.  Anything that cannot be keyed (an array or a DTensor
inside a list, ``out=``) takes the slow path every time.  ``FAST_PATH`` is a
:class:`collectives.BoundedCache` (first in, first out beyond its size), emptied
with every other cache by :func:`dtensor_np.clear_caches`;
:func:`fast_path_stats` counts the entries built (misses) and the calls served
(hits).

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> call_key(np.add, (x, 2.0)) == (np.add, x.spec, float, 2.0)
    True
    >>> y = x + 2.0; y = x + 2.0                        # the second call is one lookup
    >>> FAST_PATH.get(call_key(np.add, (x, 2.0))) is not None
    True
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Mapping, Optional

import numpy as np

from collectives import BoundedCache, memo, static_key
from collectives.keys import FLOAT_TYPES, PLAIN_TYPES
from collectives.spmd import LOCAL_CALLS_MASK, local_calls

from .arrays import as_array
from .spec import DTensorSpec

__all__ = [
    "FAST_PATH",
    "FAST_PATH_SIZE",
    "call_key",
    "compile_entry",
    "fast_path_stats",
    "key_fingerprint",
    "register_fast_type",
]

FAST_PATH_SIZE = 8192
FAST_PATH: BoundedCache = BoundedCache(FAST_PATH_SIZE, name="dtensor_np.fast_path")
"""``call_key(...) -> entry(args) -> result``."""
_HITS = [0]  # the entries count their calls here (a list item: no global statement on the hot path)
_MISSES = [0]
_BUILDERS: dict[type, Callable[[dict, DTensorSpec, Any], Any]] = {}  # class -> build(shards, spec, namespace)
_KEYWORDS = object()  # separates the positional arguments from the keywords in a key
_PLAIN = PLAIN_TYPES
_FLOATS = FLOAT_TYPES


def register_fast_type(cls: type, build: Callable[[dict, DTensorSpec, Any], Any]) -> None:
    """Let calls on ``cls`` (exactly: not its subclasses) take the fast path.

    ``cls`` keeps its spec in ``_spec``, its ``{rank: array}`` in ``_shards``
    and its namespace in ``_namespace``; ``build(shards, spec, namespace)`` makes
    a result without copying or checking anything.

    Example:
        >>> import dtensor_np as dt
        >>> dt.DTensor in _BUILDERS
        True
    """
    _BUILDERS[cls] = build


def fast_path_stats() -> dict[str, int]:
    """``{"hits", "misses", "entries", "maxsize"}``: calls served from :data:`FAST_PATH`, entries built, held, at most.

    Example:
        >>> sorted(fast_path_stats())
        ['entries', 'hits', 'maxsize', 'misses']
    """
    return {"hits": _HITS[0], "misses": _MISSES[0], "entries": len(FAST_PATH), "maxsize": FAST_PATH.maxsize}


class _Counts(dict):
    """``FAST_PATH.counts`` as ``cache_info`` reads it: the live hit and miss counts."""

    def __getitem__(self, name: str) -> int:
        return (_HITS if name == "hits" else _MISSES)[0]


FAST_PATH.counts = _Counts(hits=0, misses=0)


def call_key(head: Any, args: tuple, kwargs: Optional[Mapping[str, Any]] = None) -> Optional[tuple]:
    """The fast-path key of a call, or None when the call must take the slow path.

    ``head`` names the op (the NumPy function or ufunc, ``(ufunc, method)``
    for a ufunc method, a rule for indexing); a DTensor of a registered type
    stands as its spec (interned: hashed and compared by identity), a plain
    int, bool or float as its type then its value (a float zero or NaN by its
    ``repr``), anything else as :func:`collectives.static_key` keys it.

    Example:
        >>> import numpy as np
        >>> call_key(np.sum, ([1, 2],), {"axis": 0})[1:]
        ((<class 'list'>, (<class 'int'>, 1), (<class 'int'>, 2)), <object object at ...>, 'axis', (<class 'int'>, 0))
        >>> call_key(np.sum, (np.ones(2),)) is None
        True
    """
    if not kwargs:  # the most common calls, built without a loop (the same key the loop builds)
        n = len(args)
        if n == 2:
            a, b = args
            ca, cb = a.__class__, b.__class__
            if ca in _BUILDERS:
                if cb in _BUILDERS:
                    return (head, a._spec, b._spec)
                if cb in _FLOATS:
                    return (head, a._spec, cb, b if b == b and b != 0 else repr(b))
                if cb in _PLAIN:
                    return (head, a._spec, cb, b)
            elif cb in _BUILDERS:
                if ca in _FLOATS:
                    return (head, ca, a if a == a and a != 0 else repr(a), b._spec)
                if ca in _PLAIN:
                    return (head, ca, a, b._spec)
            if ca in _BUILDERS and cb not in _FLOATS and cb not in _PLAIN:  # an index, a static tuple
                item = static_key(b)
                return None if item is None else (head, a._spec, item)
        elif n == 1:
            a = args[0]
            if a.__class__ in _BUILDERS:
                return (head, a._spec)
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
            item = static_key(a)
            if item is None:
                return None
            append(item)
    if kwargs:
        append(_KEYWORDS)
        for name, value in kwargs.items():
            item = static_key(value)
            if item is None:
                return None
            append(name)
            append(item)
    return tuple(key)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@memo(maxsize=8192, name="dtensor_np.key_fingerprints")
def key_fingerprint(key: tuple) -> int:
    """A fingerprint of a call's key that is the same in every process making the same call (an int64).

    A key's ``hash`` is not: its specs hash by identity, strings by a per-process
    seed.  Its ``repr`` is, once the addresses (``<function f at 0x...>``) are
    taken out.  Every dispatched call folds this into the next SPMD agreement
    (:func:`collectives.spmd.note_local_call`), on the slow path and in its entry.

    Example:
        >>> import numpy as np, dtensor_np as dt
        >>> x = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
        >>> key_fingerprint(call_key(np.sum, (x,), {"axis": 0})) == key_fingerprint(call_key(np.sum, (x,), {"axis": 0}))
        True
        >>> key_fingerprint(call_key(np.add, (x, 1))) == key_fingerprint(call_key(np.add, (x, 2)))
        False
    """
    text = _ADDRESS.sub("", repr(_canonical(key))).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


def _canonical(value: Any) -> Any:
    """``value`` with every frozenset as a sorted tuple: a set's ``repr`` follows its hashes, which differ between
    processes for strings."""
    if value.__class__ is tuple:
        return tuple(_canonical(v) for v in value)
    if value.__class__ is frozenset:
        return ("frozenset", *sorted((_canonical(v) for v in value), key=repr))
    return value


def _is_scalar_result(value: Any) -> bool:
    return isinstance(value, (np.generic, bool, int, float, complex))


def compile_entry(key: tuple, args: tuple, tensors: tuple, decision: Any, backend: Any, made: Any,
                  outputs: tuple[dict[int, Any], ...], move: Callable[[Any, DTensorSpec, DTensorSpec], Any]) -> None:
    """Keep the entry of a call that just ran through its rule in :data:`FAST_PATH` under ``key``, where it has one.

    ``tensors`` are the call's distributed arguments (the rule's ``bind``),
    ``made`` its result, ``outputs`` the ranks' raw results (scalars among them
    are turned into arrays by the entry too) and ``move(shards, src, dst)`` the
    redistribute of an input.  An entry reads only the distributed arguments of
    ``args``, at the positions they have here, so a call whose DTensors are not
    all top-level arguments (a list of them, a DTensor inside an index) has none.
    """
    if decision.data_dependent:  # a value-dependent shape is never reused
        return
    build = _BUILDERS.get(tensors[0].__class__)
    positions = tuple(i for i, a in enumerate(args) if a.__class__ in _BUILDERS)
    if build is None or len(positions) != len(tensors) or any(args[p] is not t for p, t in zip(positions, tensors)):
        return
    results = made if decision.multiple_outputs else (made,)
    if any(o.__class__ is not tensors[0].__class__ for o in results):
        return
    specs = tuple(o._spec for o in results)
    moves = tuple(_mover(t._spec, dst, move) for t, dst in zip(tensors, decision.inputs))
    scalars = any(_is_scalar_result(v) for out in outputs for v in out.values())
    FAST_PATH.put(key, _entry(positions, moves, decision, backend, specs, build, scalars, key_fingerprint(key)))
    _MISSES[0] += 1


def _mover(src: DTensorSpec, dst: DTensorSpec, move: Callable[[Any, DTensorSpec, DTensorSpec], Any]
           ) -> Optional[Callable[[Any], Any]]:
    """The runner of ``move`` from ``src`` to ``dst``, or None when the input stays as it is."""
    if src is dst:
        return None
    return lambda shards: move(shards, src, dst)


def _entry(positions: tuple[int, ...], moves: tuple, decision: Any, backend: Any, specs: tuple,
           build: Any, scalars: bool, fingerprint: int) -> Callable[[tuple], Any]:
    """``entry(args) -> result``: the call with every decision made (see the module doc); each call folds
    ``fingerprint`` (its key's) into the next SPMD agreement, as ``collectives.spmd.note_local_call`` does."""
    ranks = tuple(backend.ranks)
    local = decision.local
    first = positions[0]
    hits, calls, mask = _HITS, local_calls, LOCAL_CALLS_MASK
    if decision.program is None and not decision.multiple_outputs and not scalars and not any(moves):
        (spec,) = specs
        if len(ranks) == 1:
            (r,) = ranks
            if len(positions) == 1:
                def one(args: tuple) -> Any:
                    hits[0] += 1
                    calls[0] = (calls[0] + fingerprint) & mask
                    a = args[first]
                    return build({r: local(r, a._shards[r])}, spec, a._namespace)
                return one
            if len(positions) == 2:
                second = positions[1]

                def two(args: tuple) -> Any:
                    hits[0] += 1
                    calls[0] = (calls[0] + fingerprint) & mask
                    a = args[first]
                    return build({r: local(r, a._shards[r], args[second]._shards[r])}, spec, a._namespace)
                return two
        elif len(positions) <= 2:  # simulated: every rank in one comprehension
            second = positions[-1]

            def each(args: tuple) -> Any:
                hits[0] += 1
                calls[0] = (calls[0] + fingerprint) & mask
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
        calls[0] = (calls[0] + fingerprint) & mask
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

