"""The collectives, one module each: a frozen op per collective with its simulated and MPI bodies.

``OPS`` maps each kind's name to its op class; the backends look a kind up
here and nowhere else.  Adding a collective: write its module (a
:class:`CollectiveOp` subclass: ``parse``, ``check_local``, ``check_group``,
``out_shape``, ``simulate``, ``mpi_call``), add it to ``OPS`` below, and give
:class:`collectives.Backend` its three named methods (``kind``, ``ikind``,
``prepare_kind``).

Example:
    >>> KINDS
    ('all_gather', 'all_reduce', 'reduce_scatter', 'all_to_all', 'broadcast', 'scatter', 'scan')
    >>> OPS["all_reduce"].parse(2, (0, 1), op="max")
    AllReduce(op='max')
"""
from .all_gather import AllGather
from .all_reduce import AllReduce
from .all_to_all import AllToAll
from .base import CollectiveOp, MpiCall
from .broadcast import Broadcast
from .exchange import Exchange
from .exscan import ExScan
from .rechunk import Rechunk
from .reduce_scatter import ReduceScatter
from .scatter import Scatter
from .scatter_blocks import ScatterBlocks

__all__ = [
    "KINDS",
    "OPS",
    "AllGather",
    "AllReduce",
    "AllToAll",
    "Broadcast",
    "ExScan",
    "Exchange",
    "CollectiveOp",
    "MpiCall",
    "Rechunk",
    "ReduceScatter",
    "Scatter",
    "ScatterBlocks",
]

OPS: dict[str, type[CollectiveOp]] = {
    op.name: op
    for op in (AllGather, AllReduce, ReduceScatter, AllToAll, Broadcast, Scatter, ScatterBlocks, Rechunk, Exchange,
               ExScan)
}
"""Every collective by its kind name."""

KINDS: tuple[str, ...] = tuple(dict.fromkeys(op.counted_as for op in OPS.values()))
"""The kinds ``comm_counter`` counts, in order (``scatter_blocks`` counts as a ``scatter``)."""
