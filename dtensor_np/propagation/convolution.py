"""``convolve`` and ``correlate`` of a long sharded signal with a short kernel: one halo exchange.

The longer operand (the signal, ``a`` when the lengths are equal) keeps its
sharding; the shorter (the kernel, ``m`` values) is replicated (gathered with
one ``all_gather`` when it is sharded: every output needs all of it).  The
output is sharded like the signal: each rank computes the outputs it holds
(their ``torch.chunk`` block) from the signal's values under them, ``m - 1``
around its block, which arrive from its neighbours in one ``Alltoallv``
(counted as ``all_to_all``: ``m - 1`` values per block boundary, plus the
shift of the output's chunking when the mode changes the length).  Every
rank runs NumPy's own ``convolve``/``correlate`` on that window, in the
order the arguments were given, so the values are NumPy's exactly.
``correlate`` with the longer operand second runs backwards along it (NumPy
reverses its result): the same halo, with the window taken from the far
end, so the rows that move are those of a reversal.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> x = dt.distribute_tensor(np.arange(8.0), dt.DeviceMesh((2,)), [dt.Shard(0)])
    >>> with dt.comm_counter() as c:
    ...     y = np.convolve(x, [1.0, -1.0], mode="valid")
    >>> y.full_tensor().tolist(), str(y.spec), c.counts["all_to_all"], c.bytes["all_to_all"]
    ([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 'S(0)', 1, 8)
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import numpy as np

from collectives import array_module, frozen

from ..placements import Replicate, Shard
from ..sharded import array_operands, is_sharded
from ..spec import DTensorSpec, TensorMeta
from .common import partial_free, single_sharding
from .halo import clip_range, fetch_windows, layout_of
from .registry import Decision, OpRule, register
from .signature_bind import named_arguments, no_more_arguments

__all__ = ["mode_offset"]

Shards = dict[int, Any]


def _bind(func: Callable[..., Any], default: str) -> Callable[[tuple, dict], tuple[tuple[Any, ...], Hashable]]:
    name = f"numpy.{func.__name__}"

    def bind(args: tuple, kwargs: dict) -> tuple[tuple[Any, ...], Hashable]:
        given = named_arguments(name, ("a", "v", "mode"), args, kwargs)
        a, v, mode = given.pop("a", None), given.pop("v", None), given.pop("mode", default)
        no_more_arguments(name, given)
        a, v = array_operands([a, v])
        if not is_sharded(a) or not is_sharded(v):
            raise TypeError(f"{name} on DTensors: expected a and v as arrays, got {type(a).__name__} and "
                            f"{type(v).__name__}")
        return (a, v), frozen(mode)

    return bind


def mode_offset(mode: str, short: int, inverted: bool) -> int:
    """Where the output of ``mode`` starts in the ``full`` output, with a kernel of ``short`` values;
    ``inverted``: NumPy computed it with the operands swapped and reversed the result (``correlate`` with the
    longer operand second).

    Example:
        >>> mode_offset("valid", 4, False), mode_offset("same", 4, False), mode_offset("same", 4, True)
        (3, 1, 2)
    """
    if mode == "full":
        return 0
    if mode == "valid":
        return short - 1
    return short // 2 if inverted else short - 1 - short // 2


def _mode_name(func: Callable[..., Any], mode: Any) -> str:
    """NumPy's mode (``'valid'``, ``'same'``, ``'full'``) of the ``mode`` argument (NumPy's error when it has none)."""
    length = len(func(np.zeros(3), np.zeros(2), mode))
    return {2: "valid", 3: "same", 4: "full"}[length]


def _convolution_rule(func: Callable[..., Any], default: str) -> OpRule:
    def decide(specs: tuple[DTensorSpec, ...], mode_arg: Any) -> Decision:
        a, v = (single_sharding(partial_free(s)) for s in specs)
        probe = [np.zeros(s.shape if s.ndim != 1 else (min(s.shape[0], 1),), s.dtype) for s in (a, v)]
        dtype = np.asarray(func(*probe, mode_arg)).dtype  # NumPy's errors: too deep, empty, a bad mode
        mode = _mode_name(func, mode_arg)
        la, lv = (s.shape[0] if s.ndim else 1 for s in (a, v))
        second = lv > la  # the signal is v (NumPy swaps them)
        signal, kernel = (v, a) if second else (a, v)
        n, m = max(la, lv), min(la, lv)
        inverted = second and func is np.correlate
        offset = mode_offset(mode, m, inverted)
        length = {"full": n + m - 1, "same": n, "valid": n - m + 1}[mode]
        mesh = signal.mesh
        replicated = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, kernel.tensor_meta)
        sharded_dim = next((i for i, p in enumerate(signal.placements) if isinstance(p, Shard) and mesh.shape[i] > 1),
                           None) if signal.ndim == 1 else None
        placements = tuple(Shard(0) if i == sharded_dim else Replicate() for i in range(mesh.ndim))
        signal = signal.with_placements(placements)
        out = DTensorSpec(mesh, placements, TensorMeta((length,), dtype))
        inputs = (replicated, signal) if second else (signal, replicated)

        def call(rank: int, x: Any, y: Any) -> Any:
            return func(x, y, mode_arg)

        if sharded_dim is None:
            return Decision(inputs, (out,), call)
        seq = layout_of(signal, 0, out, 0)
        smallest = m + 1 if second else m  # a window of the signal still the longer (or equal) operand
        want = {}
        for r, (o0, o1) in seq.out.items():
            if o1 == o0:
                want[r] = (0, 0)
                continue
            f0, f1 = o0 + offset, o1 + offset  # the full outputs [f0, f1)
            lo, hi = (n - f1, n - 1 - f0 + m) if inverted else (f0 - m + 1, f1)
            lo, hi = clip_range(lo, hi, n)
            if hi - lo < smallest:
                hi = min(n, lo + smallest)
                lo = max(0, hi - smallest)
            want[r] = (lo, hi)

        def program(backend: Any, first: Shards, other: Shards) -> Shards:
            signals, kernels = (other, first) if second else (first, other)
            windows = fetch_windows(backend, signals, seq, 0, want)
            result = {}
            for r, w in windows.items():
                o0, o1 = seq.out[r]
                if o1 == o0:
                    result[r] = array_module(w).empty(0, dtype)
                    continue
                full = func(kernels[r], w, "full") if second else func(w, kernels[r], "full")
                start = o0 + offset - ((n - want[r][1]) if inverted else want[r][0])
                result[r] = array_module(w).ascontiguousarray(full[start:start + o1 - o0])
            return result

        return Decision(inputs, (out,), None, program=program)

    return OpRule(func.__name__, _bind(func, default), decide)


register(np.convolve)(_convolution_rule(np.convolve, "full"))
register(np.correlate)(_convolution_rule(np.correlate, "valid"))
