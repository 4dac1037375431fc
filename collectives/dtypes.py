"""Which NumPy dtypes can be communicated, and the MPI datatype that moves each.

Types MPI has (bool, ints, float32/64, long double, complex) use MPI's
predefined datatypes (``MPI.Datatype.fromcode``, the lookup behind
``mpi4py.util.dtlib``, which would return a duplicate that MPICH's predefined
reduction ops refuse).  Everything else that is plain
fixed-size data (float16, bfloat16 from ml_dtypes, datetime64, ...) moves as a
committed contiguous datatype of ``itemsize`` bytes, never raw ``MPI.BYTE``,
so MPI can never cut an element in two (e.g. when it splits a reduction).
"""
from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

from .caches import memo

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = [
    "block_datatype",
    "bytes_datatype",
    "dtype_code",
    "dtype_name",
    "has_predefined_mpi_type",
    "movement_datatype",
    "unsupported_dtype_error",
    "validate_dtype",
]

_accepted: set[np.dtype] = set()
_names_by_code: dict[int, str] = {}


def validate_dtype(dtype: np.dtype, kind: str) -> None:
    """Raise ``TypeError`` naming ``dtype`` if it cannot be communicated.

    Object, string (``S``/``U``/``T``) and void/structured dtypes are refused; plain
    fixed-size types, including user types such as ``ml_dtypes.bfloat16``, pass.

    Example:
        >>> validate_dtype(np.dtype(object), "all_gather")
        Traceback (most recent call last):
        ...
        TypeError: all_gather: cannot communicate arrays of dtype object (object, string and void dtypes are not supported)
    """
    if dtype in _accepted:
        return
    if dtype.hasobject or dtype.kind in "OSUT" or dtype.type is np.void or dtype.fields:
        raise unsupported_dtype_error(kind, str(dtype))
    _accepted.add(dtype)


def unsupported_dtype_error(kind: str, name: str, rank: int | None = None) -> TypeError:
    """The ``TypeError`` for an array of dtype ``name`` (on ``rank``, if another rank's)."""
    where = f" on rank {rank}" if rank is not None else ""
    return TypeError(
        f"{kind}: cannot communicate arrays of dtype {name}{where} "
        "(object, string and void dtypes are not supported)"
    )


# A code with this bit set carries ``dtype.str`` itself (up to 7 ASCII bytes, e.g. ``>f8``, ``<M8[ns]``),
# so any process can name it; other dtypes (structured, user types such as bfloat16) get a CRC below 2**32.
_SPELLED = 1 << 62
_SPELLED_BYTES = 7


@memo(maxsize=None, name="collectives.dtype_codes")
def _spells(text: str, dtype: np.dtype) -> bool:
    """Whether NumPy reads ``text`` back as ``dtype`` (an extension dtype's ``str``, ml_dtypes' ``>W4``, may not
    parse at all)."""
    try:
        return np.dtype(text) == dtype
    except TypeError:
        return False


def dtype_code(dtype: np.dtype) -> int:
    """A small int naming ``dtype``, equal on every process (sent in check descriptors).

    Example:
        >>> dtype_name(dtype_code(np.dtype(">f8"))), dtype_name(dtype_code(np.dtype("int32")))
        ('>f8', 'int32')
    """
    text = dtype.str
    if len(text) <= _SPELLED_BYTES and text.isascii() and _spells(text, dtype):
        return _SPELLED | int.from_bytes(text.encode(), "little")
    code = zlib.crc32(f"{dtype.str}|{dtype.name}".encode())
    _names_by_code.setdefault(code, str(dtype))
    return code


def dtype_name(code: int) -> str:
    """The readable name of the dtype a code from ``dtype_code`` names (``float32``, ``>f8``, ``<U3``)."""
    if code & _SPELLED:
        text = (code & ~_SPELLED).to_bytes(_SPELLED_BYTES, "little").rstrip(b"\0").decode("ascii", "replace")
        try:
            return str(np.dtype(text))
        except TypeError:
            return text
    if code not in _names_by_code:
        for scalar_type in set(np.sctypeDict.values()):
            try:
                native = np.dtype(scalar_type)
                for dtype in (native, native.newbyteorder(">"), native.newbyteorder("<")):
                    dtype_code(dtype)
            except TypeError:
                pass
    return _names_by_code.get(code, f"<dtype #{code}>")


def has_predefined_mpi_type(dtype: np.dtype) -> bool:
    """True for the dtypes MPI has a predefined datatype for (and can reduce natively)."""
    if not dtype.isnative:
        return False
    return dtype.kind in "biu" or dtype.char in "fdgFDG"


@memo(maxsize=None, name="collectives.mpi_datatypes", persistent=True)
def movement_datatype(dtype: np.dtype) -> MPI.Datatype:
    """The MPI datatype that moves elements of ``dtype`` (predefined, or cached and committed)."""
    if has_predefined_mpi_type(dtype):
        from mpi4py import MPI

        try:
            return MPI.Datatype.fromcode(dtype.char)
        except (ValueError, KeyError):
            pass
    return bytes_datatype(dtype.itemsize)


@memo(maxsize=None, name="collectives.mpi_byte_datatypes", persistent=True)
def bytes_datatype(itemsize: int) -> MPI.Datatype:
    """A committed contiguous datatype of ``itemsize`` bytes (one opaque element)."""
    from mpi4py import MPI

    return MPI.BYTE.Create_contiguous(itemsize).Commit()


@memo(maxsize=1024, name="collectives.mpi_block_datatypes", persistent=True)
def block_datatype(dtype: np.dtype, shape: tuple[int, ...], block: tuple[int, ...],
                   offset: tuple[int, ...]) -> MPI.Datatype:
    """A committed datatype that picks the block of ``block`` shape at ``offset`` out of a C array of ``shape``.

    One element of it is the whole block (an MPI subarray type); the block
    must not be empty.
    """
    element = movement_datatype(dtype)
    if not shape:  # a 0-d array: the block is its one element
        return element
    return element.Create_subarray(list(shape), list(block), list(offset)).Commit()
