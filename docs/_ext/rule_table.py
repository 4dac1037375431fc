"""The operation table of the documentation: what each registered sharding rule does, found by running it.

A documentation tool, not part of the package: it imports ``dtensor_np`` as
any user does and records which rules a call runs through the dispatcher's
hook (:func:`dtensor_np.dispatch.observing_rules`).  The Sphinx extension
``operation_table`` writes :func:`markdown_table` into the docs at build time,
and ``tests/test_docs.py`` checks the table against the rule registry.

For every NumPy callable in the rule registry, :func:`coverage_rows` calls it
on a small array placed on a simulated mesh of 2 ranks, once per input
placement kind, and records the output placements and the collectives that
ran (``comm_counter``); it also traces the same call (``dt.trace``) to say
whether the op can be traced.  Nothing here is written by hand per op except
the probe call (which arguments, which axis the op works along), so the table
cannot drift from the rules: :func:`markdown_table` renders it, and the docs
build writes it into the operation table page.

Input placement kinds (mesh of 2, a 1-D mesh):

* ``S(untouched)``: sharded on an axis the op does not work along (a batch or
  row axis);
* ``S(op axis)``: sharded on the axis the op reduces, contracts, transforms or
  slices (empty where the op has none, e.g. elementwise ops);
* ``R``: replicated; ``P(sum)``: a pending sum.

Other operands (the second matrix of ``matmul``, the right-hand side of
``solve``) are replicated; both operands of a binary ufunc get the same
placement.

Example:
    >>> import numpy as np
    >>> row = next(r for r in coverage_rows() if r.name == "numpy.sum")
    >>> row.cells["S(op axis)"], row.cells["P(sum)"], row.traceable
    ('P(sum)', 'P(sum)', True)
    >>> row.cells["S(untouched)"]
    'S(0)'
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional

import numpy as np

import dtensor_np as dt
from dtensor_np.dispatch import observing_rules
from dtensor_np.propagation.registry import registered_callables

__all__ = ["KINDS", "Probe", "CoverageRow", "coverage_rows", "markdown_table", "qualified_name", "rule_names"]

KINDS = ("S(untouched)", "S(op axis)", "R", "P(sum)")
"""The input placement kinds, the table's columns."""


@dataclass(frozen=True)
class Probe:
    """How to call one op: ``call(x, R)`` with ``x`` of ``shape`` and ``dtype``.

    ``R(array)`` replicates another operand; ``untouched`` and ``axis`` are the
    dims of ``x`` to shard for the two Shard kinds (None: no such dim).
    """

    call: Callable[..., Any]
    shape: tuple[int, ...] = (4, 4)
    dtype: str = "float64"
    untouched: Optional[int] = 0
    axis: Optional[int] = None
    data: Optional[Callable[[tuple[int, ...]], np.ndarray]] = None


@dataclass
class CoverageRow:
    """One row of the table: the op, the group of rules it belongs to, and one cell per input kind."""

    name: str
    group: str
    traceable: bool
    cells: dict[str, str] = field(default_factory=dict)


def qualified_name(func: Any) -> str:
    """``numpy.linalg.matmul``, ``numpy.add``, ``operator.getitem``: the name the table uses for a registry key.

    Example:
        >>> import numpy as np
        >>> qualified_name(np.linalg.matmul), qualified_name(np.add)
        ('numpy.linalg.matmul', 'numpy.add')
    """
    module = getattr(func, "__module__", None) or ("numpy" if isinstance(func, np.ufunc) else "")
    if module == "_operator":
        module = "operator"
    return f"{module}.{func.__name__}"


def rule_names() -> set[str]:
    """The qualified names of every registered callable (the registry, read directly)."""
    return {qualified_name(f) for f in registered_callables()}


def _spd(shape: tuple[int, ...]) -> np.ndarray:
    n = shape[-1]
    base = np.arange(np.prod(shape), dtype=float).reshape(shape) / 100.0
    return base + base.swapaxes(-1, -2) + n * np.eye(n)


def _range(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(1, int(np.prod(shape)) + 1).reshape(shape) / 4.0


_REDUCTIONS = ("sum", "mean", "prod", "max", "min", "amax", "amin", "any", "all")
_BATCH3 = (2, 4, 4)


def _probes() -> dict[str, Probe]:
    p: dict[str, Probe] = {}
    for name in _REDUCTIONS:
        p[f"numpy.{name}"] = Probe(lambda x, R, f=getattr(np, name): f(x, axis=0), untouched=1, axis=0)
    contraction = dict(untouched=0, axis=1)
    batch = dict(shape=_BATCH3, untouched=0, axis=1, data=_spd)
    p["numpy.matmul"] = Probe(lambda x, R: np.matmul(x, R(np.ones((4, 3)))), **contraction)
    p["numpy.linalg.matmul"] = Probe(lambda x, R: np.linalg.matmul(x, R(np.ones((4, 3)))), **contraction)
    p["numpy.dot"] = Probe(lambda x, R: np.dot(x, R(np.ones((4, 3)))), **contraction)
    p["numpy.tensordot"] = Probe(lambda x, R: np.tensordot(x, R(np.ones((4, 3))), axes=1), **contraction)
    p["numpy.linalg.tensordot"] = Probe(lambda x, R: np.linalg.tensordot(x, R(np.ones((4, 3))), axes=1), **contraction)
    p["numpy.einsum"] = Probe(lambda x, R: np.einsum("ij,jk->ik", x, R(np.ones((4, 3)))), **contraction)
    p["numpy.vecdot"] = Probe(lambda x, R: np.vecdot(x, R(np.ones(4))), **contraction)
    p["numpy.linalg.vecdot"] = Probe(lambda x, R: np.linalg.vecdot(x, R(np.ones(4))), **contraction)
    p["numpy.cross"] = Probe(lambda x, R: np.cross(x, R(np.ones((4, 3)))), shape=(4, 3), untouched=0, axis=1)
    p["numpy.outer"] = Probe(lambda x, R: np.outer(x, R(np.ones(3))), shape=(4,), untouched=0)
    p["numpy.linalg.outer"] = Probe(lambda x, R: np.linalg.outer(x, R(np.ones(3))), shape=(4,), untouched=0)
    p["numpy.linalg.cross"] = Probe(lambda x, R: np.linalg.cross(x, R(np.ones((4, 3)))), shape=(4, 3), untouched=0,
                                    axis=1)
    p["numpy.linalg.trace"] = Probe(lambda x, R: np.linalg.trace(x), **batch)
    p["numpy.linalg.diagonal"] = Probe(lambda x, R: np.linalg.diagonal(x), **batch)
    p["numpy.trace"] = Probe(lambda x, R: np.trace(x), shape=(4, 4, 2), untouched=2, axis=0)
    p["numpy.diagonal"] = Probe(lambda x, R: np.diagonal(x), shape=(4, 4, 2), untouched=2, axis=0)
    p["numpy.concatenate"] = Probe(lambda x, R: np.concatenate([x, x], axis=0), untouched=1, axis=0)
    p["numpy.stack"] = Probe(lambda x, R: np.stack([x, x]), untouched=0)
    p["numpy.reshape"] = Probe(lambda x, R: np.reshape(x, (4, 2, 2)), untouched=0, axis=1)
    p["numpy.ravel"] = Probe(lambda x, R: np.ravel(x), untouched=0, axis=1)
    p["numpy.transpose"] = Probe(lambda x, R: np.transpose(x))
    p["numpy.matrix_transpose"] = Probe(lambda x, R: np.matrix_transpose(x))
    p["numpy.linalg.matrix_transpose"] = Probe(lambda x, R: np.linalg.matrix_transpose(x))
    p["numpy.swapaxes"] = Probe(lambda x, R: np.swapaxes(x, 0, 1))
    p["numpy.moveaxis"] = Probe(lambda x, R: np.moveaxis(x, 0, 1))
    p["numpy.expand_dims"] = Probe(lambda x, R: np.expand_dims(x, 0))
    p["numpy.squeeze"] = Probe(lambda x, R: np.squeeze(x, axis=1), shape=(4, 1, 4), untouched=0)
    p["numpy.where"] = Probe(lambda x, R: np.where(x, x, x))
    p["numpy.clip"] = Probe(lambda x, R: np.clip(x, 0.5, 2.0))
    p["numpy.round"] = Probe(lambda x, R: np.round(x, 1))
    p["numpy.real"] = Probe(lambda x, R: np.real(x))
    p["numpy.imag"] = Probe(lambda x, R: np.imag(x))
    p["numpy.astype"] = Probe(lambda x, R: np.astype(x, np.float32))
    p["dtensor_np.arrays.astype"] = Probe(lambda x, R, f=_RULE_KEYS.get("dtensor_np.arrays.astype"): f(x, np.float32))
    for name in ("empty_like", "zeros_like", "ones_like"):
        p[f"numpy.{name}"] = Probe(lambda x, R, f=getattr(np, name): f(x))
    p["numpy.full_like"] = Probe(lambda x, R: np.full_like(x, 2.0))
    p["operator.getitem"] = Probe(lambda x, R: x[1:3], untouched=1, axis=0)
    p["operator.setitem"] = Probe(lambda x, R: x.at[1:3].set(0.0), untouched=1, axis=0)
    # numpy.linalg: a batch of 2 matrices of 4 x 4 (symmetric positive definite)
    for name in ("cholesky", "det", "eigh", "eigvalsh", "inv", "matrix_norm", "matrix_rank", "pinv", "qr",
                 "slogdet", "svd", "svdvals"):
        p[f"numpy.linalg.{name}"] = Probe(lambda x, R, f=getattr(np.linalg, name): f(x), **batch)
    p["numpy.linalg.matrix_power"] = Probe(lambda x, R: np.linalg.matrix_power(x, 2), **batch)
    p["numpy.linalg.solve"] = Probe(lambda x, R: np.linalg.solve(x, R(np.ones((2, 4, 1)))), **batch)
    p["numpy.linalg.vector_norm"] = Probe(lambda x, R: np.linalg.vector_norm(x, axis=-1), untouched=0, axis=1)
    # scans, statistics, arg-reductions and sorts along an axis
    for name in ("cumsum", "cumprod", "cumulative_sum", "cumulative_prod", "var", "std", "argmax", "argmin",
                 "sort", "argsort", "flip"):
        p[f"numpy.{name}"] = Probe(lambda x, R, f=getattr(np, name): f(x, axis=0), untouched=1, axis=0)
    for name in ("unique", "unique_values"):
        p[f"numpy.{name}"] = Probe(lambda x, R, f=getattr(np, name): f(x), untouched=0, axis=0)
    for name in ("unique_all", "unique_counts", "unique_inverse"):
        p[f"numpy.{name}"] = Probe(lambda x, R, f=getattr(np, name): f(x)[0], untouched=0, axis=0)
    p["numpy.around"] = Probe(lambda x, R: np.around(x, 1))
    p["numpy.roll"] = Probe(lambda x, R: np.roll(x, 1, axis=0), untouched=1, axis=0)
    p["numpy.searchsorted"] = Probe(lambda x, R: np.searchsorted(R(np.arange(4.0)), x))
    for name in ("nonzero", "flatnonzero", "argwhere"):
        p[f"numpy.{name}"] = Probe(lambda x, R, f=getattr(np, name): (lambda r: r[0] if isinstance(r, tuple) else r)(f(x)),
                                   untouched=0, axis=0)
    p["numpy.tril"] = Probe(lambda x, R: np.tril(x))
    p["numpy.triu"] = Probe(lambda x, R: np.triu(x, 1))
    p["numpy.broadcast_to"] = Probe(lambda x, R: np.broadcast_to(x, (2, 4, 4)))
    p["numpy.broadcast_arrays"] = Probe(lambda x, R: np.broadcast_arrays(x, R(np.ones((1, 4))))[0])
    p["numpy.meshgrid"] = Probe(lambda x, R: np.meshgrid(x, x)[0], shape=(4,), untouched=0)
    p["numpy.repeat"] = Probe(lambda x, R: np.repeat(x, 2, axis=0), untouched=1, axis=0)
    p["numpy.tile"] = Probe(lambda x, R: np.tile(x, (2, 1)), untouched=1, axis=0)
    p["numpy.unstack"] = Probe(lambda x, R: np.unstack(x, axis=0)[0], untouched=1, axis=0)
    p["numpy.take"] = Probe(lambda x, R: np.take(x, [0, 3], axis=0), untouched=1, axis=0)
    p["numpy.take_along_axis"] = Probe(lambda x, R: np.take_along_axis(x, R(np.zeros((4, 4), dtype=np.int64)), axis=0),
                                       untouched=1, axis=0)
    # the rules of dtensor_np.functions' shape, selection and set helpers (issue 37), by qualified name
    def helper(name: str) -> Any:
        return _RULE_KEYS.get(f"dtensor_np.propagation.{name}")

    p["dtensor_np.propagation.row_maps.row_map"] = Probe(
        lambda x, R, f=helper("row_maps.row_map"): f(x, axis=0, segments=((0, 3, -1, 4), (0, 0, 0, 2))), untouched=1,
        axis=0)
    p["dtensor_np.propagation.placing.put_along"] = Probe(
        lambda x, R, f=helper("placing.put_along"): f(x, R(np.zeros((4, 1), np.int64)), 9.0, axis=1), untouched=0,
        axis=1)
    p["dtensor_np.propagation.placing.isin_elements"] = Probe(
        lambda x, R, f=helper("placing.isin_elements"): f(x, R(np.array([0.5, 1.0]))))
    p["dtensor_np.propagation.placing.lexsort_keys"] = Probe(
        lambda x, R, f=helper("placing.lexsort_keys"): f(x, x, axis=0), untouched=1, axis=0)
    p["dtensor_np.propagation.placing.partition_along"] = Probe(
        lambda x, R, f=helper("placing.partition_along"): f(x, kth=(1,), axis=0), untouched=1, axis=0)
    p["dtensor_np.propagation.placing.whole_along"] = Probe(
        lambda x, R, f=helper("placing.whole_along"): f(x, axis=0), untouched=1, axis=0)
    p["dtensor_np.propagation.placing.first_result"] = Probe(
        lambda x, R, f=helper("placing.first_result"): f(x, axis=1, func=np.sum), untouched=0)
    p["dtensor_np.propagation.placing.apply_blocks"] = Probe(
        lambda x, R, f=helper("placing.apply_blocks"): f(x, axis=1, func=np.cumsum, meta=((4,), "float64")),
        untouched=0)
    p["dtensor_np.propagation.placing.distinct"] = Probe(
        lambda x, R, f=helper("placing.distinct"): f(x), untouched=0, axis=0)
    p["dtensor_np.propagation.placing.lookup"] = Probe(
        lambda x, R, f=helper("placing.lookup"): f(R(np.arange(3.0)), np.astype(x, np.int64) % 3))
    p["dtensor_np.propagation.placing.cycled"] = Probe(
        lambda x, R, f=helper("placing.cycled"): f(R(np.arange(3.0)), x))
    p["dtensor_np.propagation.placing.scatter_masked"] = Probe(
        lambda x, R, f=helper("placing.scatter_masked"): f(x, x > 1.0, R(np.arange(float(np.sum(np.arange(1, 17) > 4))))),
        untouched=None, axis=0)
    p["dtensor_np.propagation.placing.blockwise"] = Probe(
        lambda x, R, f=helper("placing.blockwise"): f(x, func=np.i0))
    # numpy.fft: along the last axis, or the last two
    for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fftshift", "ifftshift"):
        p[f"numpy.fft.{name}"] = Probe(lambda x, R, f=getattr(np.fft, name): f(x, axes=-1) if "shift" in f.__name__
                                       else f(x, axis=-1), untouched=0, axis=1)
    for name in ("fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"):
        p[f"numpy.fft.{name}"] = Probe(lambda x, R, f=getattr(np.fft, name): f(x, axes=(-2, -1)), shape=_BATCH3,
                                       untouched=0, axis=1)
    return p


_RULE_KEYS: dict[str, Any] = {}


def _ufunc_probe(f: np.ufunc) -> Optional[Probe]:
    """Elementwise: every operand gets ``x``; the first dtype (float, int, bool) the ufunc takes."""
    for dtype in ("float64", "int64", "bool"):
        try:
            with np.errstate(all="ignore"):
                f(*[np.ones((1,), dtype)] * f.nin)
        except TypeError:
            continue
        return Probe(lambda x, R, f=f: f(*[x] * f.nin), dtype=dtype, data=None)
    return None


def _group(func: Any) -> str:
    if isinstance(func, np.ufunc):
        return "ufunc"
    module = getattr(func, "__module__", "")
    if module.startswith("numpy.linalg"):
        return "numpy.linalg"
    if module.startswith("numpy.fft"):
        return "numpy.fft"
    if qualified_name(func) in {f"numpy.{n}" for n in _REDUCTIONS}:
        return "reduction"
    return "function"


def _fmt_placements(result: Any) -> str:
    results = result if isinstance(result, tuple) else (result,)
    out = []
    for r in results:
        placements = getattr(r, "placements", None)
        out.append("".join(str(p) for p in placements) if placements is not None else type(r).__name__)
    return ", ".join(out)


def _fmt_collectives(counts: dict[str, int]) -> str:
    return " + ".join(f"{n} {k}" if n > 1 else k for k, n in counts.items() if n)


def _run(probe: Probe, mesh: Any, placement: Any) -> str:

    data = (probe.data or _range)(probe.shape).astype(probe.dtype)
    if isinstance(placement, dt.Partial):
        x = dt.distribute_tensor(data, mesh, [dt.Replicate()]).redistribute([placement])
    else:
        x = dt.distribute_tensor(data, mesh, [placement])

    def replicate(a: np.ndarray) -> Any:
        a = np.asarray(a)
        return dt.distribute_tensor(a if a.dtype.kind in "iub" else a.astype(float), mesh, [dt.Replicate()])

    try:
        with dt.comm_counter() as c, np.errstate(all="ignore"):
            y = probe.call(x, replicate)
    except dt.ShardingError:
        return "ShardingError"
    except (TypeError, ValueError) as e:
        return type(e).__name__
    moved = _fmt_collectives(c.counts)
    return _fmt_placements(y) + (f" · {moved}" if moved else "")


def _traceable(probe: Probe) -> bool:

    try:
        dt.trace(lambda a: probe.call(a, lambda v: np.asarray(v, dtype=float)), dt.ShapeDtype(probe.shape, probe.dtype))
    except Exception:
        return False
    return True


@lru_cache(maxsize=1)
def _rows() -> tuple[CoverageRow, ...]:

    _RULE_KEYS.update({qualified_name(f): f for f in registered_callables()})
    probes = _probes()
    mesh = dt.init_device_mesh((2,), backend="simulated")
    rows = []
    for name, func in sorted(_RULE_KEYS.items()):
        probe = probes.get(name) or (_ufunc_probe(func) if isinstance(func, np.ufunc) else None)
        row = CoverageRow(name, "function" if name in probes and isinstance(func, np.ufunc) else _group(func), False)
        if probe is None:
            row.cells = dict.fromkeys(KINDS, "datetime only" if name == "numpy.isnat"
                                      else "not probed")
        else:
            placements = {
                "S(untouched)": None if probe.untouched is None else dt.Shard(probe.untouched),
                "S(op axis)": None if probe.axis is None else dt.Shard(probe.axis),
                "R": dt.Replicate(),
                "P(sum)": dt.Partial("sum"),
            }
            for kind, placement in placements.items():
                row.cells[kind] = "" if placement is None else _run(probe, mesh, placement)
            row.traceable = _traceable(probe)
        rows.append(row)
    return tuple(rows)


def coverage_rows() -> list[CoverageRow]:
    """One :class:`CoverageRow` per registered callable, sorted by name (computed once, then cached)."""
    return list(_rows())


_METHODS: dict[str, Callable[[Any], Any]] = {
    "x.T": lambda x: x.T,
    "x.mT": lambda x: x.mT,
    "x.transpose()": lambda x: x.transpose(),
    "x.reshape(16)": lambda x: x.reshape(16),
    "x.ravel()": lambda x: x.ravel(),
    "x.swapaxes(0, 1)": lambda x: x.swapaxes(0, 1),
    "x.astype('f4')": lambda x: x.astype("f4"),
    "x.sum()": lambda x: x.sum(),
    "x.mean()": lambda x: x.mean(),
    "x.max()": lambda x: x.max(),
    "x.min()": lambda x: x.min(),
    "x.prod()": lambda x: x.prod(),
    "x.any()": lambda x: x.any(),
    "x.all()": lambda x: x.all(),
    "x.clip(0, 1)": lambda x: x.clip(0, 1),
    "x + y": lambda x: x + x,
    "x - y": lambda x: x - x,
    "x * y": lambda x: x * x,
    "x / y": lambda x: x / x,
    "x ** y": lambda x: x**x,
    "x @ y": lambda x: x @ x,
    "-x": operator.neg,
    "abs(x)": abs,
    "x < y": lambda x: x < x,
    "x == y": lambda x: x == x,
    "x[1:3]": lambda x: x[1:3],
    "x[1:3] = 0": lambda x: x.__setitem__(slice(1, 3), 0.0),
    "x.at[0].add(1)": lambda x: x.at[0].add(1.0),
}


def method_rows() -> list[tuple[str, str]]:
    """Array methods and operators of a DTensor, and the rules that run for each (recorded, not written down).

    Example:
        >>> dict(method_rows())["x @ y"]
        'matmul'
    """
    mesh = dt.init_device_mesh((2,), backend="simulated")
    x = dt.distribute_tensor(_range((4, 4)), mesh, [dt.Shard(0)])
    seen: list[str] = []
    rows = []
    with observing_rules(lambda rule: seen.append(rule.name)):
        for text, fn in _METHODS.items():
            seen.clear()
            dt.clear_caches()  # a repeated call would be served by the fast path, which runs no rule
            try:
                fn(x)
            except Exception as e:  # noqa: BLE001  (the table says what it raised)
                seen.append(type(e).__name__)
            rows.append((text, ", ".join(dict.fromkeys(seen)) or "(no rule: handled by DTensor itself)"))
    return rows


def unruled_names() -> list[str]:
    """NumPy functions and ufuncs named in the Array API standard that raise "no sharding rule" on a DTensor.

    Each is called on a float64 DTensor; those that raise ``ShardingError``
    ("no sharding rule") are listed.  Inside ``dt.replicate_fallback()`` they
    run on gathered inputs.  (The Array API namespace writes some of them
    itself, e.g. its creation functions.)
    """

    mesh = dt.init_device_mesh((2,), backend="simulated")
    x = dt.distribute_tensor(_range((4, 4)), mesh, [dt.Shard(0)])
    xp = dt.array_api.namespace(mesh)
    out = []
    for n in dir(xp):
        f = getattr(np, n, None)
        if n.startswith("_") or not callable(f) or isinstance(f, type):
            continue
        try:
            with np.errstate(all="ignore"), dt.implicit_gather("allow"):  # np.asarray & co. gather: not a rule
                f(*[x] * (f.nin if isinstance(f, np.ufunc) else 1))
        except dt.ShardingError as e:
            if "no sharding rule" in str(e):
                out.append(n)
        except Exception:  # noqa: BLE001  (a call that needs other arguments: not listed)
            pass
    return sorted(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


def markdown_table() -> str:
    """The operation table as MyST markdown (the docs build writes it into ``operations.md``)."""
    rows = coverage_rows()
    lines = [
        f"{len(rows)} NumPy callables have a sharding rule (the functions without one are listed at the end). Each cell: the output placement on a mesh of 2 ranks, "
        "then the collectives that ran (none: the op stays local). `—`: the op has no such axis.",
        "",
    ]
    for group in ("function", "reduction", "ufunc", "numpy.linalg", "numpy.fft"):
        members = [r for r in rows if r.group == group]
        title = {"function": "Functions", "reduction": "Reductions", "ufunc": "Ufuncs (elementwise)",
                 "numpy.linalg": "numpy.linalg", "numpy.fft": "numpy.fft"}[group]
        lines += [f"## {title}", "", "| op | " + " | ".join(KINDS) + " | traceable |",
                  "|---" * (len(KINDS) + 2) + "|"]
        for r in members:
            cells = " | ".join(_cell(r.cells[k]) for k in KINDS)
            lines.append(f"| `{r.name}` | {cells} | {'yes' if r.traceable else 'no'} |")
        lines.append("")
    lines += ["## Array methods and operators", "", "The rules that run when each is called on a DTensor (recorded).", "",
              "| call | op |", "|---|---|"]
    lines += [f"| `{_cell(t)}` | {op} |" for t, op in method_rows()]
    missing = unruled_names()
    lines += ["", "## No rule: `ShardingError`, or `dt.replicate_fallback()`", "",
              "These raise `dt.ShardingError` (\"no sharding rule\") on a DTensor; inside "
              "`with dt.replicate_fallback():` they run on gathered inputs (counted by `dt.fallback_counts()`).", "",
              "NumPy functions named in the Array API standard that raise it when called on a DTensor "
              "(the Array API namespace writes some of these itself):", "",
              ", ".join(f"`numpy.{n}`" for n in missing), ""]
    return "\n".join(lines)
