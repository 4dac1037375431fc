"""Random numbers for sharded arrays that equal the one-device draw on every mesh and placement.

Keys are values, as in JAX: ``key(seed)`` is a ``uint32`` array of shape
``(2,)`` (save it in a checkpoint, pass it anywhere), ``split(key, n)`` an
``(n, 2)`` array of new keys and ``fold_in(key, data)`` one new key.  Every
draw (``normal``, ``uniform``, ``bernoulli``, ``randint``, ``permutation``)
is a pure function of the key and the element's global flat position (C
order over the global shape): the bits of element ``i`` are
Threefry-2x32 (20 rounds, Salmon et al. 2011, as JAX) of the key and the
counter ``i``.  So each rank computes only its own block, with no
communication, and the full array equals the one-device draw
(``mesh=None``: a plain array) for the same key on any mesh, any
placements, uneven and empty shards included.  ``permutation`` too, but
each rank draws and sorts all ``n`` sort keys and keeps its block.

The arithmetic runs in the array module of the key: a CuPy key
(``cupy.asarray(key)``) draws CuPy shards with the same bits.  ``uniform``,
``bernoulli``, ``randint`` and ``permutation`` are exact integer arithmetic
(equal bit for bit between NumPy and CuPy); ``normal`` takes ``log``,
``sqrt`` and ``cos`` of the library, which may differ between NumPy and
CuPy in the last ulp.  ``Partial`` placements are refused: a draw is whole
values, place it on ``Replicate`` or ``Shard``.  ``device=`` takes a
:class:`~dtensor_np.Sharding` (``x.sharding``-style mesh and placements) or a
mesh (replicated) instead of ``mesh=``/``placements=``, as the Array API
namespace's creation functions do.

Example:
    >>> import numpy as np
    >>> import dtensor_np as dt
    >>> key = dt.random.key(0)
    >>> k1, k2 = dt.random.split(key)
    >>> mesh = dt.DeviceMesh((2, 2))
    >>> x = dt.random.normal(k1, (5, 3), mesh=mesh, placements=[dt.Shard(0), dt.Shard(1)])
    >>> bool(np.array_equal(x.full_tensor(), dt.random.normal(k1, (5, 3))))
    True
    >>> y = dt.random.normal(k1, (5, 3), device=dt.Sharding(mesh, [dt.Replicate(), dt.Shard(0)]))
    >>> bool(np.array_equal(y.full_tensor(), x.full_tensor()))
    True
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Any, Callable, Optional, Sequence

import numpy as np

from collectives import array_module

from .devices import Sharding
from .dtensor import DTensor
from .errors import ShardingError
from .int_tuple import as_ints, is_integer
from .mesh import DeviceMesh
from .placements import Partial, Replicate, placements_str
from .runtime import backend_for
from .spec import DTensorSpec, TensorMeta, normalize_placements

__all__ = ["key", "split", "fold_in", "normal", "uniform", "bernoulli", "randint", "permutation", "threefry2x32"]

_M32 = 0xFFFFFFFF
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA
# Counters of draws are below 2**63 (fewer than 2**62 elements, at most 2 counters each); keys derived
# by split and fold_in use counters whose high word has its top bit set: no derived key is a draw's bits.
_SPLIT_TAG, _FOLD_TAG = 0x80000000, 0xC0000000
_FLOATS = ("float16", "float32", "float64")
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def threefry2x32(k: Any, x0: Any, x1: Any) -> tuple[Any, Any]:
    """Threefry-2x32 with 20 rounds of the key ``k`` (2 uint32) and the counters ``(x0, x1)`` (uint32 arrays).

    Vectorised over the counters in their array module (NumPy or CuPy);
    NumPy runs it in chunks that stay in the cache.

    Example (the Random123 known-answer test, as JAX checks it):
        >>> import numpy as np
        >>> k = np.array([0x13198A2E, 0x03707344], np.uint32)
        >>> y = threefry2x32(k, np.array([0x243F6A88], np.uint32), np.array([0x85A308D3], np.uint32))
        >>> [hex(int(v[0])) for v in y]
        ['0xc4923a9c', '0x483df7a0']
    """
    k0, k1 = int(k[0]), int(k[1])
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    xp = array_module(x0)
    shape = x0.shape  # flat while computing: 0-d arrays would turn into NumPy scalars that warn on overflow
    y0 = x0.reshape(-1) + np.uint32(ks[0])
    y1 = x1.reshape(-1) + np.uint32(ks[1])
    step = _CHUNK if xp is np else max(y0.size, 1)
    for start in range(0, y0.size, step):
        _rounds(xp, ks, y0[start:start + step], y1[start:start + step])
    return y0.reshape(shape), y1.reshape(shape)


_CHUNK = 1 << 14  # NumPy: 20 rounds over 64 KiB words at a time, in the cache


def _rounds(xp: Any, ks: tuple[int, int, int], x0: Any, x1: Any) -> None:
    """Threefry's 20 rounds and key injections, in place on ``x0`` and ``x1`` (the key already added)."""
    u32 = np.uint32
    high = xp.empty_like(x1)
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 += x1
            xp.left_shift(x1, u32(r), out=high)
            x1 >>= u32(32 - r)
            x1 |= high
            x1 ^= x0
        x0 += u32(ks[(block + 1) % 3])
        x1 += u32((ks[(block + 2) % 3] + block + 1) & _M32)


def _check_key(k: Any, name: str = "key") -> Any:
    """``k`` as a key (a uint32 array of shape (2,)), or ``TypeError``."""
    if isinstance(k, DTensor) or not (hasattr(k, "dtype") and hasattr(k, "shape")) \
            or k.dtype != np.uint32 or tuple(k.shape) != (2,):
        got = type(k).__name__ if not hasattr(k, "dtype") else f"a {k.dtype} array of shape {tuple(k.shape)}"
        raise TypeError(f"expected a {name} (a uint32 array of shape (2,) from dt.random.key), got {got}")
    return k


def _key_of(xp: Any, words: Sequence[int]) -> Any:
    return xp.asarray(np.array(words, np.uint32))


def key(seed: int) -> np.ndarray:
    """The key of an integer ``seed`` (any int of 64 bits): ``[seed >> 32, seed & 0xFFFFFFFF]`` as uint32.

    Example:
        >>> key(1).tolist(), key(-1).tolist()
        ([0, 1], [4294967295, 4294967295])
    """
    if not is_integer(seed):
        raise TypeError(f"expected an int seed, got {type(seed).__name__}")
    seed = operator.index(seed)
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"expected a seed of 64 bits (-2**63 <= seed < 2**64), got {seed}")
    seed %= 2**64
    return np.array([seed >> 32, seed & _M32], np.uint32)


def split(key: Any, n: int = 2) -> Any:
    """``n`` new keys, an ``(n, 2)`` array (``k1, k2 = split(key)``), independent of ``key``'s own draws.

    Example:
        >>> import numpy as np
        >>> ks = split(key(0), 3)
        >>> ks.shape, ks.dtype, len({tuple(k) for k in ks.tolist()})
        ((3, 2), dtype('uint32'), 3)
    """
    _check_key(key)
    if not is_integer(n) or operator.index(n) < 0:
        raise (TypeError if not is_integer(n) else ValueError)(f"expected a number of keys n >= 0, got {n!r}")
    xp = array_module(key)
    i = xp.arange(operator.index(n), dtype=np.uint32)
    y0, y1 = threefry2x32(key, i, xp.full(i.shape, _SPLIT_TAG, np.uint32))
    return xp.stack([y0, y1], axis=-1)


def fold_in(key: Any, data: int) -> Any:
    """A new key from ``key`` and an int ``data`` (0 <= data < 2**32): a key per step, layer or rank.

    Example:
        >>> bool((fold_in(key(0), 1) != fold_in(key(0), 2)).any())
        True
    """
    _check_key(key)
    if not is_integer(data) or not 0 <= operator.index(data) <= _M32:
        raise (TypeError if not is_integer(data) else ValueError)(
            f"expected data of 32 bits (0 <= data < 2**32), got {data!r}")
    xp = array_module(key)
    y0, y1 = threefry2x32(key, _key_of(xp, [operator.index(data)]), _key_of(xp, [_FOLD_TAG]))
    return xp.concatenate([y0, y1])


# -- the counters: each element's global flat position ------------------------------------
def _positions(xp: Any, shape: tuple[int, ...], block: tuple[int, ...], offset: tuple[int, ...]) -> Any:
    """The global C-order flat positions (uint64) of the block ``block`` at ``offset`` of an array of ``shape``."""
    flat = xp.zeros((), np.uint64)
    stride = 1
    for d in reversed(range(len(shape))):
        axis = xp.arange(offset[d], offset[d] + block[d], dtype=np.uint64) * np.uint64(stride)
        flat = axis.reshape((-1,) + (1,) * (len(shape) - d - 1)) + flat  # broadcasts to the block's shape
        stride *= shape[d]
    return flat


def _bits(key: Any, positions: Any, lanes: int) -> list[Any]:
    """``2 * lanes`` uint32 words per position: Threefry of the counters ``positions * lanes + lane``."""
    words = []
    for lane in range(lanes):
        c = positions if lanes == 1 else positions * np.uint64(lanes) + np.uint64(lane)
        y0, y1 = threefry2x32(key, (c & np.uint64(_M32)).astype(np.uint32), (c >> np.uint64(32)).astype(np.uint32))
        words += [y0, y1]
    return words


def _bits64(hi: Any, lo: Any) -> Any:
    return (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)


def _unit(xp: Any, words: Sequence[Any], dtype: np.dtype) -> Any:
    """Uniform floats of ``dtype`` in [0, 1), exact: the top ``nmant + 1`` bits times ``2**-(nmant + 1)``."""
    bits = np.finfo(dtype).nmant + 1
    if dtype == np.float64:
        m = _bits64(words[0], words[1]) >> np.uint64(64 - bits)
    else:
        m = words[0] >> np.uint32(32 - bits)
    return m.astype(dtype) * dtype.type(2.0 ** -bits)


# -- placing a draw -----------------------------------------------------------------------
Block = Callable[[Any, Any], Any]  # (array module, global positions of a block) -> that block of the draw


def _shape(shape: Any) -> tuple[int, ...]:
    dims = as_ints((shape,) if is_integer(shape) else shape, "shape", "an int or a sequence of ints")
    if any(d < 0 for d in dims):
        raise ValueError(f"expected a shape of non-negative sizes, got {dims}")
    if math.prod(dims) >= 2**62:
        raise ValueError(f"expected a shape of fewer than 2**62 elements, got {dims}")
    return dims


def _dtype(dtype: Any, allowed: Sequence[str], kind: str) -> np.dtype:
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    if d is None or d.name not in allowed:
        raise TypeError(f"expected {kind} dtype ({', '.join(allowed)}), got {dtype!r}")
    return d


def _placements(mesh: Optional[DeviceMesh], placements: Any, ndim: int) -> tuple:
    if mesh is None:
        if placements is not None:
            raise TypeError(f"placements need a mesh, got mesh=None and placements {placements!r}")
        return ()
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"expected a DeviceMesh or None for mesh, got {type(mesh).__name__}")
    out = normalize_placements([Replicate()] * mesh.ndim if placements is None else placements, mesh, ndim)
    if any(isinstance(p, Partial) for p in out):
        raise ShardingError(f"expected Shard or Replicate placements for a random draw, got {placements_str(out)}")
    return out


def _draw(key: Any, shape: tuple[int, ...], dtype: np.dtype, mesh: Optional[DeviceMesh], placements: tuple,
          block: Block) -> Any:
    """The draw: ``block`` of the whole array (no mesh), or a DTensor whose every rank makes its own block."""
    xp = array_module(key)
    if mesh is None:
        return xp.asarray(block(xp, _positions(xp, shape, shape, (0,) * len(shape))))  # 0-d: an array, no scalar
    spec = DTensorSpec(mesh, placements, TensorMeta(shape, dtype))
    shards = {r: xp.asarray(block(xp, _positions(xp, shape, *spec.local_block(r)))) for r in backend_for(mesh).ranks}
    return DTensor(shards, spec)


def _checked(key: Any, shape: Any, mesh: Any, placements: Any, device: Any) -> tuple[tuple[int, ...], Any, tuple]:
    """The shape, mesh and placements of a draw, checked (``device``: a Sharding or a mesh, instead of both)."""
    _check_key(key)
    dims = _shape(shape)
    if device is not None:
        if mesh is not None or placements is not None:
            raise TypeError("expected device= or mesh=/placements=, got both")
        if isinstance(device, Sharding):
            mesh, placements = device.mesh, device.placements
        elif isinstance(device, DeviceMesh):
            mesh = device
        else:
            raise TypeError(f"expected a Sharding or a DeviceMesh for device, got {type(device).__name__}")
    return dims, mesh, _placements(mesh, placements, len(dims))


# -- the distributions --------------------------------------------------------------------
def uniform(key: Any, shape: Any = (), dtype: Any = np.float64, minval: float = 0.0, maxval: float = 1.0, *,
            mesh: Optional[DeviceMesh] = None, placements: Optional[Sequence[Any]] = None, device: Any = None) -> Any:
    """Uniform floats in ``[minval, maxval)``: exact ``[0, 1)`` floats (the top mantissa bits scaled), then
    ``minval + (maxval - minval) * u``, kept below ``maxval``.

    Example:
        >>> import numpy as np
        >>> u = uniform(key(0), (1000,), np.float32, -1.0, 1.0)
        >>> u.dtype, bool((u >= -1).all() and (u < 1).all())
        (dtype('float32'), True)
    """
    dims, mesh, where = _checked(key, shape, mesh, placements, device)
    d = _dtype(dtype, _FLOATS, "a real floating")
    lo, hi = d.type(minval), d.type(maxval)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"expected finite minval < maxval, got minval={minval!r}, maxval={maxval!r}")
    top = np.nextafter(hi, lo)

    def block(xp: Any, pos: Any) -> Any:
        u = _unit(xp, _bits(key, pos, 1), d)
        return xp.minimum(xp.maximum(u * (hi - lo) + lo, lo), top)

    return _draw(key, dims, d, mesh, where, block)


def normal(key: Any, shape: Any = (), dtype: Any = np.float64, *, mesh: Optional[DeviceMesh] = None,
           placements: Optional[Sequence[Any]] = None, device: Any = None) -> Any:
    """Standard normal floats by Box-Muller from the element's own counter (``sqrt(-2 log u1) cos(2 pi u2)``).

    float64 takes two 53-bit uniforms per element (two Threefry blocks),
    float32 and float16 two 32-bit ones (one block), computed in float64
    and rounded.  ``log``, ``sqrt`` and ``cos`` are the array library's: NumPy
    and CuPy may differ in the last ulp.

    Example:
        >>> x = normal(key(0), (10_000,))
        >>> abs(float(x.mean())) < 0.05, abs(float(x.std()) - 1) < 0.05
        (True, True)
    """
    dims, mesh, where = _checked(key, shape, mesh, placements, device)
    d = _dtype(dtype, _FLOATS, "a real floating")
    f64 = np.dtype(np.float64)

    def block(xp: Any, pos: Any) -> Any:
        if d == f64:
            w = _bits(key, pos, 2)
            u1, u2 = 1.0 - _unit(xp, w[:2], f64), _unit(xp, w[2:], f64)  # u1 in (0, 1]
        else:
            w = _bits(key, pos, 1)
            u1 = (w[0].astype(f64) + 0.5) * 2.0 ** -32
            u2 = w[1].astype(f64) * 2.0 ** -32
        return (xp.sqrt(-2.0 * xp.log(u1)) * xp.cos((2.0 * math.pi) * u2)).astype(d)

    return _draw(key, dims, d, mesh, where, block)


def bernoulli(key: Any, shape: Any = (), dtype: Any = np.bool_, p: float = 0.5, *,
              mesh: Optional[DeviceMesh] = None, placements: Optional[Sequence[Any]] = None,
              device: Any = None) -> Any:
    """True (1) with probability ``p``, exactly: the element's 64 bits below ``floor(p * 2**64)``.

    ``dtype`` is ``bool`` or a float or int dtype (a 0/1 mask to multiply by).

    Example:
        >>> m = bernoulli(key(0), (10_000,), p=0.25)
        >>> m.dtype, abs(float(m.mean()) - 0.25) < 0.02
        (dtype('bool'), True)
    """
    dims, mesh, where = _checked(key, shape, mesh, placements, device)
    d = _dtype(dtype, ("bool",) + _FLOATS + _INTS, "a bool, real floating or integer")
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0 <= p <= 1:
        raise ValueError(f"expected a probability 0 <= p <= 1, got p={p!r}")
    threshold = int(Fraction(float(p)) * 2**64)

    def block(xp: Any, pos: Any) -> Any:
        if threshold >= 2**64:
            return xp.ones(pos.shape, d)
        w = _bits(key, pos, 1)
        return (_bits64(w[0], w[1]) < np.uint64(threshold)).astype(d)

    return _draw(key, dims, d, mesh, where, block)


def randint(key: Any, shape: Any, low: int, high: int, dtype: Any = np.int64, *,
            mesh: Optional[DeviceMesh] = None, placements: Optional[Sequence[Any]] = None,
            device: Any = None) -> Any:
    """Integers in ``[low, high)`` by a 64-bit multiply-shift: ``low + (bits * (high - low)) >> 64``.

    The bias is below ``(high - low) / 2**64`` per value (no modulo bias):
    each of the ``high - low`` values comes from ``floor`` or ``ceil`` of
    ``2**64 / (high - low)`` of the 64-bit words.

    Example:
        >>> import numpy as np
        >>> r = randint(key(0), (10_000,), -3, 3)
        >>> r.dtype, int(r.min()), int(r.max()), bool(np.bincount(r + 3).min() > 1500)
        (dtype('int64'), -3, 2, True)
    """
    dims, mesh, where = _checked(key, shape, mesh, placements, device)
    d = _dtype(dtype, _INTS, "an integer")
    if not (is_integer(low) and is_integer(high)):
        raise TypeError(f"expected int bounds low and high, got low={low!r}, high={high!r}")
    low, high = operator.index(low), operator.index(high)
    info = np.iinfo(d)
    if not (info.min <= low < high <= info.max + 1):
        raise ValueError(f"expected {info.min} <= low < high <= {info.max + 1} for {d.name}, got low={low}, high={high}")
    span = high - low

    def block(xp: Any, pos: Any) -> Any:
        w = _bits(key, pos, 1)
        # (bits * span) >> 64 with 32-bit halves: bits = b1 * 2**32 + b0, span = s1 * 2**32 + s0.
        b1, b0 = w[0].astype(np.uint64), w[1].astype(np.uint64)
        s1, s0 = np.uint64(span >> 32), np.uint64(span & _M32)
        m32, sh = np.uint64(_M32), np.uint64(32)
        lo_lo, hi_lo, lo_hi, hi_hi = b0 * s0, b1 * s0, b0 * s1, b1 * s1
        mid = (lo_lo >> sh) + (hi_lo & m32) + (lo_hi & m32)
        q = hi_hi + (hi_lo >> sh) + (lo_hi >> sh) + (mid >> sh)
        return (q + np.uint64(low % 2**64)).astype(d)  # wraps modulo 2**64: low + q for a negative low

    return _draw(key, dims, d, mesh, where, block)


def permutation(key: Any, n: int, dtype: Any = np.int64, *, mesh: Optional[DeviceMesh] = None,
                placements: Optional[Sequence[Any]] = None, device: Any = None) -> Any:
    """A random permutation of ``range(n)``: random sort keys, sorted.

    Element ``i``'s sort key holds its random bits above ``i`` (in the low
    ``b = bit_length(n - 1)`` bits), so keys are distinct and the sorted
    keys' low bits are the permutation; ties of the ``64 - b`` random bits
    (probability below ``n**2 / 2**(65 - b)``) keep index order.  Every rank
    draws and sorts all ``n`` keys and keeps its own block: no communication
    (``numpy.sort`` of a ``Shard(0)`` DTensor would all_gather the keys
    first, the same memory and work per rank plus a collective), ``n``
    keys of memory and ``n log n`` time per rank.

    Example:
        >>> sorted(permutation(key(0), 6).tolist())
        [0, 1, 2, 3, 4, 5]
    """
    if not is_integer(n):
        raise TypeError(f"expected an int n, got {type(n).__name__}")
    dims, mesh, where = _checked(key, (operator.index(n),), mesh, placements, device)
    d = _dtype(dtype, _INTS, "an integer")
    if dims[0] > int(np.iinfo(d).max) + 1:
        raise ValueError(f"expected n <= {int(np.iinfo(d).max) + 1} for {d.name}, got {dims[0]}")
    b = max(dims[0] - 1, 0).bit_length()
    low_mask = np.uint64((1 << b) - 1)
    xp = array_module(key)
    pos = _positions(xp, dims, dims, (0,))
    w = _bits(key, pos, 1)
    whole = (xp.sort((_bits64(w[0], w[1]) & ~low_mask) | pos) & low_mask).astype(d)
    if mesh is None:
        return whole
    spec = DTensorSpec(mesh, where, TensorMeta(dims, d))
    return DTensor({r: whole[spec.local_index(r)].copy() for r in backend_for(mesh).ranks}, spec)
