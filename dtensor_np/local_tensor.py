"""``LocalTensor``: the shards of many simulated ranks, operated on one rank at a time.

In simulated mode ``DTensor.to_local()`` returns a ``LocalTensor`` instead of
one array: every NumPy function or operator applied to it runs once per rank
on that rank's shard, and ``DTensor.from_local`` takes it back.  So a script
written for ``mpiexec`` (where ``to_local()`` is this rank's array) runs
unchanged in a notebook.

Example:
    >>> import numpy as np
    >>> t = LocalTensor({0: np.array([1, 2]), 1: np.array([3])})
    >>> (np.exp(t * 0) + 1).shards[1].tolist()
    [2.0]
    >>> t.shapes
    {0: (2,), 1: (1,)}
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

from numpy.lib.mixins import NDArrayOperatorsMixin

from .errors import ShardingError

__all__ = ["LocalTensor", "local_map"]


class LocalTensor(NDArrayOperatorsMixin):
    """Per-rank arrays that behave like one array: NumPy calls apply shard by shard.

    Example:
        >>> import numpy as np
        >>> {r: float(v) for r, v in LocalTensor({0: np.ones(2), 1: np.zeros(2)}).sum().shards.items()}
        {0: 2.0, 1: 0.0}
    """

    __slots__ = ("_shards",)

    def __init__(self, shards: Mapping[int, Any]) -> None:
        if not shards:
            raise ShardingError("a LocalTensor needs the shard of at least one rank")
        object.__setattr__(self, "_shards", MappingProxyType(dict(shards)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("LocalTensor is immutable")

    # -- contents ----------------------------------------------------------
    @property
    def shards(self) -> dict[int, Any]:
        """``{rank: array}`` for every rank held."""
        return dict(self._shards)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(self._shards)

    @property
    def shapes(self) -> dict[int, tuple[int, ...]]:
        """The shape of every rank's shard (they may differ: uneven sharding)."""
        return {r: tuple(x.shape) for r, x in self._shards.items()}

    @property
    def shape(self) -> tuple[int, ...]:
        """The common shape of the shards; a ShardingError when ranks hold different shapes."""
        shapes = set(self.shapes.values())
        if len(shapes) != 1:
            raise ShardingError(f"the ranks hold shards of different shapes {self.shapes}; use .shapes")
        return shapes.pop()

    @property
    def dtype(self) -> Any:
        dtypes = {r: x.dtype for r, x in self._shards.items()}
        if len(set(dtypes.values())) != 1:
            raise ShardingError(f"the ranks hold shards of different dtypes {dtypes}")
        return next(iter(dtypes.values()))

    @property
    def ndim(self) -> int:
        return len(next(iter(self._shards.values())).shape)

    def __getitem__(self, index: Any) -> "LocalTensor":
        return self.map(lambda x: x[index])

    def __getattr__(self, name: str) -> Any:
        """Any other array attribute, per rank: ``t.T``, ``t.reshape(-1)``, ``t.astype("f4")``."""
        if name.startswith("__"):
            raise AttributeError(name)
        values = {r: getattr(x, name) for r, x in self._shards.items()}
        if all(callable(v) for v in values.values()):
            return lambda *args, **kwargs: _wrap({r: v(*_at(args, r), **_at(kwargs, r)) for r, v in values.items()})
        return _wrap(values)

    def map(self, fn: Callable[[Any], Any]) -> "LocalTensor":
        """``fn`` applied to every rank's shard."""
        return LocalTensor({r: fn(x) for r, x in self._shards.items()})

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a LocalTensor holds one array per simulated rank; pick one with .shards[rank] "
            "or rebuild the DTensor with DTensor.from_local(...)"
        )

    # -- NumPy protocols ---------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if "out" in kwargs:
            raise TypeError("LocalTensor is immutable: out= is not supported")
        fn = getattr(ufunc, method)
        return _wrap({r: fn(*_at(inputs, r), **_at(kwargs, r)) for r in self._ranks_of(inputs, kwargs)})

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return _wrap({r: func(*_at(args, r), **_at(kwargs, r)) for r in self._ranks_of(args, kwargs)})

    def _ranks_of(self, args: Any, kwargs: Any) -> tuple[int, ...]:
        ranks = set(self.ranks)
        for t in _find(args) + _find(kwargs):
            if set(t.ranks) != ranks:
                raise ShardingError(f"LocalTensors over different ranks: {sorted(ranks)} and {sorted(t.ranks)}")
        return self.ranks

    def __repr__(self) -> str:
        body = ", ".join(f"{r}: {x!r}" for r, x in self._shards.items())
        return f"LocalTensor({{{body}}})"


def local_map(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` once per rank with every LocalTensor argument replaced by that rank's shard.

    Example:
        >>> import numpy as np
        >>> local_map(lambda x, k: x * k, LocalTensor({0: np.ones(1), 1: np.ones(1)}), 3).shards[1].tolist()
        [3.0]
    """
    found = _find(args) + _find(kwargs)
    if not found:
        return fn(*args, **kwargs)
    return _wrap({r: fn(*_at(args, r), **_at(kwargs, r)) for r in found[0].ranks})


def _find(tree: Any) -> list[LocalTensor]:
    if isinstance(tree, LocalTensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for x in tree for t in _find(x)]
    if isinstance(tree, dict):
        return [t for x in tree.values() for t in _find(x)]
    return []


def _at(tree: Any, rank: int) -> Any:
    """``tree`` with every LocalTensor replaced by its shard on ``rank``."""
    if isinstance(tree, LocalTensor):
        return tree._shards[rank]
    if isinstance(tree, tuple):
        return tuple(_at(x, rank) for x in tree)
    if isinstance(tree, list):
        return [_at(x, rank) for x in tree]
    if isinstance(tree, dict):
        return {k: _at(v, rank) for k, v in tree.items()}
    return tree


def _wrap(per_rank: dict[int, Any]) -> Any:
    """Per-rank results as a LocalTensor (or a tuple of them when each rank returned a tuple)."""
    first = next(iter(per_rank.values()))
    if isinstance(first, tuple):
        return tuple(LocalTensor({r: v[i] for r, v in per_rank.items()}) for i in range(len(first)))
    if first is None:
        return None
    return LocalTensor(per_rank)
