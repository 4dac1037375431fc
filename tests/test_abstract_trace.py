"""Tracing is abstract: shapes and dtypes only, as ``jax.eval_shape``; nothing of the results' size is allocated."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtensor_np as dt

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float16", "float32", "float64", "complex64"]


def test_tracing_a_huge_model_allocates_nothing():
    n = 10**6  # two 10^6 x 10^6 float64 operands: 8 TB each
    tracemalloc.start()
    g = dt.trace(
        lambda x, w, b: (np.exp(np.maximum(x @ w + b, 0.5)).mean(axis=0), (x.T * 2).astype("f4").sum()),
        dt.ShapeDtype((n, n), "f8"), dt.ShapeDtype((n, n), "f4"), dt.ShapeDtype((n,), "f8"),
    )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20, f"tracing allocated {peak} bytes"
    assert [str(v.aval) for v in g.outputs] == [f"f64[{n}]", "f32[]"]
    dt.graph.verify(g)  # re-deriving every node's avals is abstract too


def test_shape_errors_still_surface_at_trace_time():
    with pytest.raises(ValueError):
        dt.trace(lambda x, w: x @ w, dt.ShapeDtype((4, 3), "f8"), dt.ShapeDtype((4, 5), "f8"))
    with pytest.raises(ValueError):
        dt.trace(lambda x, y: x + y, dt.ShapeDtype((4, 3), "f8"), dt.ShapeDtype((5,), "f8"))


OPS = {
    "add": lambda a, b: a + b,
    "true_divide": lambda a, b: a / b,
    "floor_divide": lambda a, b: a // b,
    "maximum": np.maximum,
    "less": np.less,
    "matmul": lambda a, b: a @ b.T,
    "einsum": lambda a, b: np.einsum("ij,kj->ik", a, b),
    "where": lambda a, b: np.where(a > 0, a, b),
    "sum": lambda a, b: np.sum(a, axis=0),
    "sum_dtype": lambda a, b: np.sum(a, axis=1, dtype=np.float32),
    "mean": lambda a, b: np.mean(a),
    "max_keepdims": lambda a, b: np.max(a, axis=1, keepdims=True),
    "prod": lambda a, b: np.prod(b, axis=0),
    "any": lambda a, b: np.any(a, axis=0),
    "reshape": lambda a, b: a.reshape(-1),
    "transpose": lambda a, b: a.T,
    "concatenate": lambda a, b: np.concatenate([a, b], axis=0),
    "stack": lambda a, b: np.stack([a, b], axis=1),
    "astype": lambda a, b: a.astype(np.int16),
    "clip": lambda a, b: np.clip(a, 0, 3),
    "divmod": lambda a, b: np.divmod(a, b),
}


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")  # astype of complex to int16, on purpose
@settings(max_examples=150)
@given(st.sampled_from(sorted(OPS)), st.sampled_from(DTYPES), st.sampled_from(DTYPES),
       st.integers(1, 4), st.integers(1, 4))
def test_abstract_avals_equal_what_numpy_computes(op, dtype_a, dtype_b, rows, cols):
    """For every op with a rule, the traced avals equal those of the same call on real arrays."""
    fn = OPS[op]
    a = (np.arange(rows * cols).reshape(rows, cols) % 3 + 1).astype(dtype_a)
    b = (np.arange(rows * cols).reshape(rows, cols) % 2 + 1).astype(dtype_b)
    try:
        with np.errstate(all="ignore"):
            want = fn(a, b)
    except (TypeError, ValueError) as e:  # NumPy refuses these dtypes: so does tracing
        with pytest.raises(type(e)):
            dt.trace(fn, dt.ShapeDtype(a.shape, a.dtype), dt.ShapeDtype(b.shape, b.dtype))
        return
    g = dt.trace(fn, dt.ShapeDtype(a.shape, a.dtype), dt.ShapeDtype(b.shape, b.dtype))
    wants = want if isinstance(want, tuple) else (want,)
    assert [str(v.aval) for v in g.outputs] == [str(dt.ShapeDtype.of(w)) for w in wants]
    got = g(a, b)
    for x, w in zip(got if isinstance(got, tuple) else (got,), wants):
        np.testing.assert_array_equal(x, w)
