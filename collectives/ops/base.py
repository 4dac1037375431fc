"""What a collective is, once: its validated arguments and its two bodies (simulated and MPI).

Each collective is one frozen :class:`CollectiveOp` subclass in its own module
of this package.  An instance is the call's static arguments for ONE group,
validated and in group order (``AllGather(axis=1, sizes=(3, 2))``); the class
knows how to

* ``parse`` the backend method's keyword arguments for a group,
* check one member's input (``check_local``) and the members' inputs against
  each other (``check_group``, from :mod:`collectives.agreement`),
* say what shape a member gets (``out_shape``),
* ``simulate`` the group with NumPy/CuPy (the simulated backend), and
* describe the one mpi4py call a member makes (``mpi_call`` -> :class:`MpiCall`).

The backends are generic drivers over these: nothing else in ``collectives``
knows what an all_gather does.

Example:
    >>> import numpy as np
    >>> from collectives.ops import AllGather
    >>> op = AllGather.parse(2, (0, 1), axis=-1, in_sizes={0: 2, 1: 1})
    >>> op, op.out_shape((3, 2), 0, 2)
    (AllGather(axis=1, sizes=(2, 1)), (3, 3))
    >>> op.simulate([np.zeros((3, 2)), np.ones((3, 1))])[1][0].tolist()
    [0.0, 0.0, 1.0]
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Optional

import numpy as np

from ..agreement import MemberInfo, same_shapes, sizes_cover
from ..arguments import with_length
from ..chunks import chunk_sizes
from ..errors import CollectiveError
from ..reduce_ops import validate_reduction
from ..types import Array, Group

__all__ = ["CollectiveOp", "CombinesElementwise", "MpiCall", "SplitsAlongAxis", "deal", "masked_axes", "pieces"]

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MpiCall:
    """The one mpi4py call a member makes, worked out for its input shape and dtype.

    The call is ``getattr(comm, name)(*arguments)``, and its non-blocking form
    ``I<name>`` (``Allgatherv`` -> ``Iallgatherv``) takes the same arguments:

    * ``[send, *send_spec], [recv, *recv_spec], *extra``, with ``send =
      pack(x)`` (``x`` itself when ``pack`` is None) and ``recv`` a new array of
      ``recv_shape``;
    * ``None, [recv, *recv_spec], *extra`` when ``send_spec`` is None (a
      non-root member of a scatter);
    * ``[recv, *recv_spec], *extra`` when ``in_place`` (broadcast): ``recv`` is
      ``pack(x)`` when ``pack`` is given (the root's copy), else new.

    ``finish(recv)`` gives the member's result (``recv`` itself when None);
    ``host_only`` says device arrays must be staged through host memory (a
    reduction that runs a NumPy function inside MPI, ``numpy_op``: its
    floating-point errors are noted there and dealt with after the call, as
    ``np.geterr()`` says, on every member); ``reads_input`` False
    says the member's input is never read (a non-root member of a broadcast
    or scatter), so it is not copied to make it contiguous.
    """

    name: str
    send_spec: Optional[tuple[Any, ...]]
    recv_shape: Shape
    recv_spec: tuple[Any, ...]
    extra: tuple[Any, ...] = ()
    pack: Optional[Callable[[Array], Array]] = None
    finish: Optional[Callable[[Array], Array]] = None
    in_place: bool = False
    host_only: bool = False
    reads_input: bool = True
    numpy_op: bool = False


def masked_axes(shape: Shape, axes: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with the entries of ``axes`` replaced by -1 (lengths the members may have differently).

    Example:
        >>> masked_axes((4, 3), (0,))
        (-1, 3)
    """
    return tuple(-1 if d in axes else int(n) for d, n in enumerate(shape))


class CollectiveOp:
    """Base of the collectives: one frozen dataclass per collective, its fields the call's static arguments.

    ``name`` is the kind (``"all_gather"``), as counted by ``comm_counter`` and
    named by the backends' methods.  Subclasses implement every method below.
    """

    __slots__ = ()
    name: ClassVar[str]
    reduces: ClassVar[bool] = False
    """True when the collective combines values (its ``op`` must suit the dtype)."""

    @classmethod
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and "counted_as" not in cls.__dict__:
            cls.counted_as = cls.name  # the key comm_counter counts it under

    counted_as: ClassVar[str]

    @classmethod
    def parse(cls, ndim: int, group: Group, **arguments: Any) -> CollectiveOp:
        """The op for ``group`` from the backend method's keyword arguments; CollectiveError when invalid."""
        raise NotImplementedError

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        """Raise unless one member's input (``rank`` at ``position`` in its group) fits the call."""

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        """Raise unless the members' inputs (``infos`` in group order) fit each other."""
        raise NotImplementedError

    def agreed_shape(self, shape: Shape) -> tuple[int, ...]:
        """The part of a member's input shape that every member of a right call has alike (-1: may differ).

        It enters the fingerprint the members compare before every collective
        (:mod:`collectives.spmd`), so inputs that do not fit each other raise
        there instead of truncating or hanging in MPI.  Here: the whole shape.
        """
        return tuple(shape)

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        """The shape the member at ``position`` of a group of ``size`` gets for an input of ``shape``."""
        raise NotImplementedError

    def simulate(self, members: Sequence[Array]) -> list[Array]:
        """Every member's result (new arrays) from the members' inputs, all in this process."""
        raise NotImplementedError

    def mpi_call(self, position: int, size: int, shape: Shape, dtype: np.dtype, xp: ModuleType) -> MpiCall:
        """The MPI call of the member at ``position`` for a C-contiguous native-order input."""
        raise NotImplementedError


class CombinesElementwise:
    """What the collectives that combine the members' arrays element by element with ``op`` share (all_reduce, exscan).

    The members pass arrays of one shape, whose dtype ``op`` must be able to
    combine, and each gets that shape back.
    """

    __slots__ = ()
    name: ClassVar[str]
    op: str

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        validate_reduction(dtype, self.op, self.name)

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes(self.name, group, infos)

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return shape


class SplitsAlongAxis:
    """What the collectives that cut one array along ``axis`` into the members' pieces share (reduce_scatter, scatter).

    Piece ``i`` (member ``i``'s) has length ``sizes[i]``, or the ``torch.chunk``
    length when ``sizes`` is None; the members pass arrays of one shape.
    """

    __slots__ = ()
    name: ClassVar[str]
    axis: int
    sizes: Optional[tuple[int, ...]]

    def check_local(self, rank: int, position: int, shape: Shape, dtype: np.dtype) -> None:
        if self.sizes is not None and sum(self.sizes) != shape[self.axis]:
            raise CollectiveError(
                f"{self.name}: out_sizes {self.sizes} must add up to the input length {shape[self.axis]} "
                f"along axis {self.axis} (rank {rank} has shape {shape}), got {sum(self.sizes)}"
            )

    def check_group(self, group: Group, infos: Sequence[MemberInfo]) -> None:
        same_shapes(self.name, group, infos)
        if self.sizes is not None:
            sizes_cover(self.name, group, self.sizes, infos[0], self.axis)

    def piece_sizes(self, shape: Shape, size: int) -> tuple[int, ...]:
        """Every member's piece length along ``axis`` for an input of ``shape`` in a group of ``size``."""
        return self.sizes if self.sizes is not None else chunk_sizes(shape[self.axis], size)

    def out_shape(self, shape: Shape, position: int, size: int) -> Shape:
        return with_length(shape, self.axis, self.piece_sizes(shape, size)[position])


def deal(value: Array, members: int) -> list[Array]:
    """``value`` for the first member and a copy of it for every other (each member its own array)."""
    return [value] + [value.copy() for _ in range(members - 1)]


def pieces(x: Array, axis: int, sizes: Sequence[int]) -> list[Array]:
    """Views of ``x`` cut along ``axis`` into pieces of ``sizes``."""
    lead = (slice(None),) * axis
    out = []
    start = 0
    for size in sizes:
        out.append(x[lead + (slice(start, start + size),)])
        start += size
    return out
