"""``Backend``: what the higher layer calls, and the one path every collective call takes.

Every collective runs the same way on both backends: ``prepare`` works the
call out once for the input shapes and dtype of the ranks this process holds
(validated, and cached), and returns a :class:`Prepared` whose ``run(shards)``
issues it and ``start(shards)`` starts it (a :class:`~collectives.Handle`).
The general methods (``all_gather`` ...) are "check, prepare (cached), run";
the ``i``-methods "check, prepare, start"; the ``prepare_``-methods give the
``Prepared`` to callers that run one call many times (redistribute plans, graph
interpreters).  So a collective has one body per backend (its op in
:mod:`collectives.ops`), and no caller asks which backend it has.

Example:
    >>> import numpy as np
    >>> from collectives import SimulatedBackend
    >>> backend = SimulatedBackend(2)
    >>> gather = backend.prepare_all_gather(((0, 1),), {0: (2,), 1: (1,)}, "float64", in_sizes={0: 2, 1: 1})
    >>> gather
    Prepared(all_gather, dtype=float64, shapes={0: (2,), 1: (1,)}, out_shapes={0: (3,), 1: (3,)}, mpi_call=simulated)
    >>> gather.run({0: np.zeros(2), 1: np.ones(1)})[1].tolist()
    [0.0, 0.0, 1.0]
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np

from .errors import CollectiveError
from .caches import memo
from .handles import Handle
from .keys import frozen
from .types import Array, Groups, ReduceOp, Shapes, Shards, Sizes

__all__ = ["MAX_DESCRIPTOR_LENGTH", "Backend", "Prepared"]

MAX_DESCRIPTOR_LENGTH = 16
"""The most ints ``gather_descriptors`` accepts per rank."""


class Prepared:
    """A collective worked out once for the input shapes and dtype of the ranks this process holds.

    ``run(shards)`` issues it and returns every held rank's result (new
    arrays); ``start(shards)`` starts it and returns a
    :class:`~collectives.Handle` whose ``wait()`` returns them.  ``shapes`` and
    ``out_shapes`` map each held rank to its input and output shape;
    ``mpi_call`` names the MPI function (``"simulated"`` on the simulated backend).

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend
        >>> b = SimulatedBackend(2)
        >>> prepared = b.prepare_all_gather(((0, 1),), {0: (2,), 1: (2,)}, np.dtype("f8"))
        >>> prepared.run({0: np.zeros(2), 1: np.ones(2)})[1].tolist()
        [0.0, 0.0, 1.0, 1.0]
    """

    __slots__ = ("kind", "dtype", "shapes", "out_shapes", "mpi_call", "run", "start")

    def __init__(
        self, kind: str, dtype: np.dtype, shapes: Shapes, out_shapes: Shapes, mpi_call: str,
        run: Callable[[Shards], dict[int, Array]], start: Callable[[Shards], Handle],
    ) -> None:
        self.kind = kind
        self.dtype = dtype
        self.shapes = dict(shapes)
        self.out_shapes = dict(out_shapes)
        self.mpi_call = mpi_call
        self.run = run
        self.start = start

    def __repr__(self) -> str:
        return (f"Prepared({self.kind}, dtype={self.dtype}, shapes={self.shapes}, out_shapes={self.out_shapes}, "
                f"mpi_call={self.mpi_call})")


class _CallKey:
    """A prepare call's arguments, hashed and compared by their frozen form (the originals kept for the call)."""

    __slots__ = ("frozen", "groups", "shapes", "arguments")

    def __init__(self, frozen: tuple[Any, ...], groups: Groups, shapes: Shapes, arguments: Mapping[str, Any]) -> None:
        self.frozen = frozen
        self.groups = groups
        self.shapes = shapes
        self.arguments = arguments

    def __hash__(self) -> int:
        return hash(self.frozen)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CallKey) and self.frozen == other.frozen


@memo(maxsize=2048, name="collectives.prepared_calls")
def _prepare_cached(backend: Backend, kind: str, dtype: np.dtype, key: _CallKey) -> Prepared:
    return backend._prepare(kind, key.groups, dict(key.shapes), dtype, key.arguments)


class Backend(ABC):
    """The collectives every backend offers: ``SimulatedBackend`` and ``MpiBackend`` implement it.

    Every op takes per-rank shards (``{world rank: array}`` for the ranks this
    process holds) and returns a new ``dict`` with the same keys; every result
    is a new C-contiguous array.  ``groups`` partitions the world; each group
    runs the collective on its own.  ``check=True`` first makes the members
    agree that the call fits (under MPI one small ``Allgather``), so bad input
    raises on every member and none waits in the collective.

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend
        >>> backend = SimulatedBackend(2)
        >>> out = backend.all_gather({0: np.zeros(2), 1: np.ones(1)}, ((0, 1),),
        ...                          in_sizes={0: 2, 1: 1})
        >>> out[1]
        array([0., 0., 1.])
    """

    name: str
    world_size: int
    ranks: tuple[int, ...]

    # -- the one path --------------------------------------------------------------

    def prepare(self, kind: str, groups: Groups, shapes: Shapes, dtype: Any, **arguments: Any) -> Prepared:
        """Collective ``kind`` worked out for these input shapes (one per held rank) and dtype; cached.

        ``arguments`` are the keyword arguments of the general method of ``kind``
        (``axis``, ``in_sizes``, ``op``...).  Raises ``CollectiveError`` (or a
        ``TypeError`` for a dtype) when the call cannot work.
        """
        if not isinstance(shapes, Mapping):
            raise CollectiveError(
                f"prepare {kind}: expected shapes as {{rank: shape}} for the ranks this process holds, got {shapes!r}"
            )
        dtype = np.dtype(dtype)
        try:
            hashable = (frozen(groups), tuple((r, tuple(s)) for r, s in shapes.items()), frozen(arguments))
            key = _CallKey(hashable, groups, shapes, arguments)
            hash(key)
        except TypeError:  # unhashable pieces: validated (and refused) below, uncached
            return self._prepare(kind, groups, dict(shapes), dtype, arguments)
        return _prepare_cached(self, kind, dtype, key)

    def call(self, kind: str, shards: Shards, groups: Groups, *, check: bool = True, **arguments: Any) -> dict[int, Array]:
        """Run collective ``kind`` on ``shards`` (the general form of the named methods)."""
        prepared, arrays = self._checked(kind, shards, groups, check, arguments)
        return prepared.run(arrays)

    def start(self, kind: str, shards: Shards, groups: Groups, *, check: bool = True, **arguments: Any) -> Handle:
        """Start collective ``kind`` on ``shards``; ``.wait()`` on the handle returns the result."""
        prepared, arrays = self._checked(kind, shards, groups, check, arguments)
        return prepared.start(arrays)

    @abstractmethod
    def _prepare(self, kind: str, groups: Groups, shapes: dict[int, tuple[int, ...]], dtype: np.dtype,
                 arguments: Mapping[str, Any]) -> Prepared:
        """``prepare`` without the cache."""

    @abstractmethod
    def _checked(self, kind: str, shards: Shards, groups: Groups, check: bool,
                 arguments: Mapping[str, Any]) -> tuple[Prepared, dict[int, Array]]:
        """The prepared call for ``shards`` (the inputs as arrays), after the agreement ``check`` asks for."""

    # -- the collectives by name -------------------------------------------------------

    def all_gather(self, shards: Shards, groups: Groups, *, axis: int = 0, in_sizes: Optional[Sizes] = None,
                   check: bool = True) -> dict[int, Array]:
        """Concatenate every member's array along ``axis`` in group order (``in_sizes``: every rank's length)."""
        return self.call("all_gather", shards, groups, check=check, axis=axis, in_sizes=in_sizes)

    def all_reduce(self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum",
                   check: bool = True) -> dict[int, Array]:
        """Give every member the elementwise reduction of its group's arrays."""
        return self.call("all_reduce", shards, groups, check=check, op=op)

    def reduce_scatter(self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
                       out_sizes: Optional[Sizes] = None, check: bool = True) -> dict[int, Array]:
        """Reduce the group's arrays and give member ``i`` piece ``i`` along ``axis`` (torch.chunk, or ``out_sizes``)."""
        return self.call("reduce_scatter", shards, groups, check=check, op=op, axis=axis, out_sizes=out_sizes)

    def all_to_all(self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
                   in_sizes: Optional[Sizes] = None, out_sizes: Optional[Sizes] = None,
                   check: bool = True) -> dict[int, Array]:
        """Split along ``split_axis``, exchange, concatenate along ``concat_axis``."""
        return self.call("all_to_all", shards, groups, check=check, split_axis=split_axis,
                         concat_axis=concat_axis, in_sizes=in_sizes, out_sizes=out_sizes)

    def broadcast(self, shards: Shards, groups: Groups, *, root: int = 0, check: bool = True) -> dict[int, Array]:
        """Give every member a copy of the array of the member at index ``root`` (the others' data is not read)."""
        return self.call("broadcast", shards, groups, check=check, root=root)

    def scatter(self, shards: Shards, groups: Groups, *, root: int = 0, axis: int = 0,
                out_sizes: Optional[Sizes] = None, check: bool = True) -> dict[int, Array]:
        """Split the root's array along ``axis``; member ``i`` gets piece ``i`` (the others' data is not read)."""
        return self.call("scatter", shards, groups, check=check, root=root, axis=axis, out_sizes=out_sizes)

    def rechunk(self, shards: Shards, groups: Groups, *, axis: int, in_sizes: Sizes, out_sizes: Sizes,
                check: bool = True) -> dict[int, Array]:
        """Cut the members' consecutive blocks along ``axis`` (lengths ``in_sizes``) again into ``out_sizes``.

        Only the rows that change owner move (one ``Alltoallv``); see :mod:`collectives.ops.rechunk`.
        """
        return self.call("rechunk", shards, groups, check=check, axis=axis, in_sizes=in_sizes, out_sizes=out_sizes)

    def exchange(self, shards: Shards, groups: Groups, *, axis: int, send_counts: Mapping[int, Sequence[int]],
                 check: bool = True) -> dict[int, Array]:
        """Member ``q`` sends ``send_counts[q][p]`` rows along ``axis`` to member ``p`` (its rows for member 0 first).

        Each member gets the rows sent to it, member 0's first (one ``Alltoallv``); see
        :mod:`collectives.ops.exchange`.
        """
        return self.call("exchange", shards, groups, check=check, axis=axis, send_counts=send_counts)

    def exscan(self, shards: Shards, groups: Groups, *, op: str = "sum", check: bool = True) -> dict[int, Array]:
        """Member ``i`` gets the ``op`` reduction of members ``0 .. i-1`` (member 0: the identity)."""
        return self.call("exscan", shards, groups, check=check, op=op)

    def iall_gather(self, shards: Shards, groups: Groups, *, axis: int = 0, in_sizes: Optional[Sizes] = None,
                    check: bool = True) -> Handle:
        """Start ``all_gather``; ``.wait()`` on the handle returns its result."""
        return self.start("all_gather", shards, groups, check=check, axis=axis, in_sizes=in_sizes)

    def iall_reduce(self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", check: bool = True) -> Handle:
        """Start ``all_reduce``; ``.wait()`` on the handle returns its result."""
        return self.start("all_reduce", shards, groups, check=check, op=op)

    def ireduce_scatter(self, shards: Shards, groups: Groups, *, op: ReduceOp = "sum", axis: int = 0,
                        out_sizes: Optional[Sizes] = None, check: bool = True) -> Handle:
        """Start ``reduce_scatter``; ``.wait()`` on the handle returns its result."""
        return self.start("reduce_scatter", shards, groups, check=check, op=op, axis=axis, out_sizes=out_sizes)

    def iall_to_all(self, shards: Shards, groups: Groups, *, split_axis: int, concat_axis: int,
                    in_sizes: Optional[Sizes] = None, out_sizes: Optional[Sizes] = None,
                    check: bool = True) -> Handle:
        """Start ``all_to_all``; ``.wait()`` on the handle returns its result."""
        return self.start("all_to_all", shards, groups, check=check, split_axis=split_axis,
                          concat_axis=concat_axis, in_sizes=in_sizes, out_sizes=out_sizes)

    def ibroadcast(self, shards: Shards, groups: Groups, *, root: int = 0, check: bool = True) -> Handle:
        """Start ``broadcast``; ``.wait()`` on the handle returns its result."""
        return self.start("broadcast", shards, groups, check=check, root=root)

    def iscatter(self, shards: Shards, groups: Groups, *, root: int = 0, axis: int = 0,
                 out_sizes: Optional[Sizes] = None, check: bool = True) -> Handle:
        """Start ``scatter``; ``.wait()`` on the handle returns its result."""
        return self.start("scatter", shards, groups, check=check, root=root, axis=axis, out_sizes=out_sizes)

    def irechunk(self, shards: Shards, groups: Groups, *, axis: int, in_sizes: Sizes, out_sizes: Sizes,
                 check: bool = True) -> Handle:
        """Start ``rechunk``; ``.wait()`` on the handle returns its result."""
        return self.start("rechunk", shards, groups, check=check, axis=axis, in_sizes=in_sizes, out_sizes=out_sizes)

    def iexchange(self, shards: Shards, groups: Groups, *, axis: int, send_counts: Mapping[int, Sequence[int]],
                  check: bool = True) -> Handle:
        """Start ``exchange``; ``.wait()`` on the handle returns its result."""
        return self.start("exchange", shards, groups, check=check, axis=axis, send_counts=send_counts)

    def iexscan(self, shards: Shards, groups: Groups, *, op: str = "sum", check: bool = True) -> Handle:
        """Start ``exscan``; ``.wait()`` on the handle returns its result."""
        return self.start("exscan", shards, groups, check=check, op=op)

    def prepare_all_gather(self, groups: Groups, shapes: Shapes, dtype: Any, *, axis: int = 0,
                           in_sizes: Optional[Sizes] = None) -> Prepared:
        """``all_gather`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("all_gather", groups, shapes, dtype, axis=axis, in_sizes=in_sizes)

    def prepare_all_reduce(self, groups: Groups, shapes: Shapes, dtype: Any, *, op: ReduceOp = "sum") -> Prepared:
        """``all_reduce`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("all_reduce", groups, shapes, dtype, op=op)

    def prepare_reduce_scatter(self, groups: Groups, shapes: Shapes, dtype: Any, *, op: ReduceOp = "sum",
                               axis: int = 0, out_sizes: Optional[Sizes] = None) -> Prepared:
        """``reduce_scatter`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("reduce_scatter", groups, shapes, dtype, op=op, axis=axis, out_sizes=out_sizes)

    def prepare_all_to_all(self, groups: Groups, shapes: Shapes, dtype: Any, *, split_axis: int, concat_axis: int,
                           in_sizes: Optional[Sizes] = None, out_sizes: Optional[Sizes] = None) -> Prepared:
        """``all_to_all`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("all_to_all", groups, shapes, dtype, split_axis=split_axis, concat_axis=concat_axis,
                            in_sizes=in_sizes, out_sizes=out_sizes)

    def prepare_broadcast(self, groups: Groups, shapes: Shapes, dtype: Any, *, root: int = 0) -> Prepared:
        """``broadcast`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("broadcast", groups, shapes, dtype, root=root)

    def prepare_scatter(self, groups: Groups, shapes: Shapes, dtype: Any, *, root: int = 0, axis: int = 0,
                        out_sizes: Optional[Sizes] = None) -> Prepared:
        """``scatter`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("scatter", groups, shapes, dtype, root=root, axis=axis, out_sizes=out_sizes)

    def prepare_rechunk(self, groups: Groups, shapes: Shapes, dtype: Any, *, axis: int, in_sizes: Sizes,
                        out_sizes: Sizes) -> Prepared:
        """``rechunk`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("rechunk", groups, shapes, dtype, axis=axis, in_sizes=in_sizes, out_sizes=out_sizes)

    def prepare_exchange(self, groups: Groups, shapes: Shapes, dtype: Any, *, axis: int,
                         send_counts: Mapping[int, Sequence[int]]) -> Prepared:
        """``exchange`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("exchange", groups, shapes, dtype, axis=axis, send_counts=send_counts)

    def prepare_exscan(self, groups: Groups, shapes: Shapes, dtype: Any, *, op: str = "sum") -> Prepared:
        """``exscan`` worked out once for these input shapes and dtype (see ``prepare``)."""
        return self.prepare("exscan", groups, shapes, dtype, op=op)

    # -- helpers for the higher layer ----------------------------------------------------

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank of the world has arrived."""

    @abstractmethod
    def all_true(self, flag_per_rank: Mapping[int, bool]) -> bool:
        """Logical AND of the flags of every world rank, the same on every rank."""

    @abstractmethod
    def gather_descriptors(self, desc_per_rank: Mapping[int, Sequence[int]]) -> dict[int, tuple[int, ...]]:
        """Every world rank's short int descriptor (at most ``MAX_DESCRIPTOR_LENGTH`` ints), known to every rank."""
