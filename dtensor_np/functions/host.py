"""The names of NumPy's API that take no distributed array, each with the reason and what to use instead.

Most make an array from Python values (``zeros``, ``arange``, ``linspace``,
window functions), configure NumPy, name or compare dtypes, read or write
files, or work on datetimes, which a DTensor never holds (MPI moves numeric
and bool data).  They are left out of the coverage count (``applicable`` is
False); their NumPy results mix into DTensor calls as replicated constants.
A few take an array but are refused (``applicable`` is True: counted as not
covered), each saying what to call instead.

Example:
    >>> REFUSED["numpy.zeros"].applicable, REFUSED["numpy.save"].applicable
    (False, True)
"""

from __future__ import annotations

from ..numpy_catalogue import Refused

__all__ = ["REFUSED"]

_CREATION = Refused(
    "makes an array from Python values, not from an array: on a mesh call it through the Array API namespace "
    "(xp = dt.array_api.namespace(mesh); xp.zeros(...), xp.arange(...)) or place its NumPy result with "
    "dt.distribute_tensor; mixed into a DTensor call as it is, a NumPy array is a replicated constant",
    applicable=False)
_CONFIG = Refused("configures or describes NumPy itself; takes no array", applicable=False)
_DTYPES = Refused("works on dtypes, type codes, Python numbers or shapes, not on arrays: pass x.dtype or x.shape",
                  applicable=False)
_FILES = Refused("reads a file or a buffer into a NumPy array: read it, then dt.distribute_tensor (each rank "
                 "keeping its block)", applicable=False)
_DATETIME = Refused("works on datetime64 arrays, which stay NumPy arrays: a DTensor holds numeric and bool data "
                    "(MPI moves those); keep datetimes as int64 counts to distribute them", applicable=False)
_STRINGS = Refused("formats a Python number as text; takes no array", applicable=False)

REFUSED: dict[str, Refused] = {}
for _name in ("arange", "empty", "eye", "full", "identity", "linspace", "logspace", "geomspace", "ones", "zeros",
              "tri", "indices", "fromfunction", "diag_indices", "tril_indices", "triu_indices", "mask_indices",
              "bartlett", "blackman", "hamming", "hanning", "kaiser", "frompyfunc",
              "bmat", "asmatrix"):
    REFUSED[f"numpy.{_name}"] = _CREATION
for _name in ("get_printoptions", "set_printoptions", "printoptions", "getbufsize", "setbufsize", "geterr",
              "seterr", "geterrcall", "seterrcall", "get_include", "show_config", "show_runtime", "info", "test"):
    REFUSED[f"numpy.{_name}"] = _CONFIG
for _name in ("typename", "isdtype", "issubdtype", "promote_types", "mintypecode", "broadcast_shapes"):
    REFUSED[f"numpy.{_name}"] = _DTYPES
for _name in ("frombuffer", "fromfile", "fromiter", "fromregex", "fromstring", "genfromtxt", "loadtxt", "load"):
    REFUSED[f"numpy.{_name}"] = _FILES
for _name in ("isnat", "busday_count", "busday_offset", "is_busday", "datetime_as_string", "datetime_data"):
    REFUSED[f"numpy.{_name}"] = _DATETIME
for _name in ("base_repr", "binary_repr", "format_float_positional", "format_float_scientific"):
    REFUSED[f"numpy.{_name}"] = _STRINGS

_WRITE = ("under MPI every rank would write the whole array to the same file: write x.full_tensor() from one rank "
          "(if rank == 0: np.{name}(path, x.full_tensor())), or each rank its own block (x.to_local())")
for _name in ("save", "savetxt", "savez", "savez_compressed"):
    REFUSED[f"numpy.{_name}"] = Refused(_WRITE.format(name=_name))
REFUSED["numpy.nested_iters"] = Refused("iterates over the memory of one array: iterate over x.to_local() on each "
                                        "rank, or over x.full_tensor()")
