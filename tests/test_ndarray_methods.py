"""``numpy.ndarray``'s methods and attributes, Python's builtins and every NumPy index form on DTensors, against NumPy.

Each array is placed rows-sharded, columns-sharded and replicated on 1 to 4 simulated ranks (and under
``mpiexec -n 2`` for the methods and builtins): 5 rows and 4 columns split unevenly, 2 rows over 3 or 4 ranks
leave empty shards.  Array results are checked by :class:`test_numpy_ops.Checks` (shape, dtype, the gathered
values and every rank's block); Python values (``item``, ``tolist``, ``len``...) equal NumPy's, of NumPy's type;
where NumPy raises, so does the DTensor, with the same kind of error.  The refused attributes raise their
documented errors; ``repr``/``str`` print NumPy's text plus the placements, and a large array's repr gathers only
the corners NumPy shows (``comm_counter`` bytes).  The methods whose NumPy functions another family implements
(``partition``, ``argpartition``, ``choose``, ``compress``, ``put``, ``trace``) run once those functions take
DTensors.
"""

from __future__ import annotations

import copy
import operator
from typing import Any, Callable

import numpy as np
import pytest

import dtensor_np as dt
from dtensor_np import Replicate, Shard
from dtensor_np.dtensor import REFUSED_ATTRIBUTES, Flags, FlatIter
from dtensor_np.functions import ndarray_methods
from dtensor_np.placements import placements_str
from dtensor_np.propagation.registry import composite_of, rule_lookup
from test_numpy_ops import Checks

SHAPES = ((5, 4), (2, 3))
PLACEMENTS = (Shard(0), Shard(1), Replicate())


def _values(shape: tuple[int, ...]) -> np.ndarray:
    """Distinct quarters in no order, the same on every rank (sums and products of a few are exact)."""
    n = int(np.prod(shape))
    return ((np.random.default_rng(3).permutation(n) + 1) / 4).reshape(shape)


def _mesh(world: Any) -> dt.DeviceMesh:
    return dt.DeviceMesh((world.size,), backend=world.kind)


def _placed(world: Any, shapes: tuple[tuple[int, ...], ...] = SHAPES) -> list[tuple[str, np.ndarray, Any]]:
    mesh = _mesh(world)
    return [(f"{shape} {p}", a, dt.distribute_tensor(a, mesh, [p]))
            for shape in shapes for a in (_values(shape),) for p in PLACEMENTS]


def _in_place(method: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """The array after ``v.method(*args, **kwargs)``, which must return None (NumPy's in-place methods)."""
    def call(v: Any) -> Any:
        returned = getattr(v, method)(*args, **kwargs)
        assert returned is None or returned is v, f"{method} returned {returned!r}"
        return v
    return call


# Array results: (NumPy array or DTensor) -> array(s); each called on a fresh copy.
ARRAY_CALLS: dict[str, Callable[[Any], Any]] = {
    "T": lambda v: v.T,
    "mT": lambda v: v.mT,
    "all": lambda v: (v > 1).all(axis=0),
    "all()": lambda v: (v > 0).all(),
    "any": lambda v: (v > 3).any(axis=1, keepdims=True),
    "argmax()": lambda v: v.argmax(),
    "argmax(axis=1)": lambda v: v.argmax(axis=1),
    "argmax(keepdims)": lambda v: v.argmax(axis=0, keepdims=True),
    "argmin(axis=-1)": lambda v: v.argmin(axis=-1),
    "argmin()": lambda v: v.argmin(),
    "argsort(axis=0)": lambda v: v.argsort(axis=0),
    "argsort(stable)": lambda v: v.argsort(axis=1, stable=True),
    "astype": lambda v: v.astype(np.int32),
    "astype(float32, F)": lambda v: v.astype(np.float32, order="F"),
    "astype(copy=False)": lambda v: v.astype(v.dtype, copy=False),
    "astype(casting=safe)": lambda v: v.astype(np.int8, casting="safe"),
    "astype(casting=same_kind)": lambda v: v.astype(np.float32, casting="same_kind"),
    "byteswap": lambda v: v.byteswap(),
    "byteswap(inplace)": lambda v: (v.byteswap(inplace=True), v)[1],
    "clip": lambda v: v.clip(1.0, 3.0),
    "clip(max=)": lambda v: v.clip(max=2.0),
    "conj": lambda v: (v + 1j * v).conj(),
    "conjugate": lambda v: (v - 2j * v).conjugate(),
    "copy": lambda v: v.copy(),
    "copy(F)": lambda v: v.copy("F"),
    "copy.copy": lambda v: copy.copy(v),
    "copy.deepcopy": lambda v: copy.deepcopy(v),
    "cumsum()": lambda v: v.cumsum(),
    "cumsum(axis=1)": lambda v: v.cumsum(axis=1),
    "cumsum(dtype)": lambda v: v.cumsum(axis=0, dtype=np.float32),
    "cumprod(axis=0)": lambda v: v.cumprod(axis=0),
    "diagonal": lambda v: v.diagonal(),
    "diagonal(1)": lambda v: v.diagonal(1),
    "dot(vector)": lambda v: v.dot(np.arange(v.shape[1], dtype=float)),
    "dot(matrix)": lambda v: v.dot(v.T),
    "fill": _in_place("fill", 1.5),
    "flatten": lambda v: v.flatten(),
    "imag": lambda v: (v + 3j * v).imag,
    "imag of real": lambda v: v.imag,
    "max()": lambda v: v.max(),
    "max(axis=1, keepdims)": lambda v: v.max(axis=1, keepdims=True),
    "mean(axis=0)": lambda v: v.mean(axis=0),
    "mean(dtype)": lambda v: v.mean(dtype=np.float32),
    "min(axis=0)": lambda v: v.min(axis=0),
    "nonzero": lambda v: (v > 2).nonzero(),
    "prod(axis=1)": lambda v: v.prod(axis=1),
    "ravel": lambda v: v.ravel(),
    "real": lambda v: (v + 3j * v).real,
    "repeat(2)": lambda v: v.repeat(2),
    "repeat(axis=0)": lambda v: v.repeat(np.arange(v.shape[0]) % 3, axis=0),
    "reshape(-1, 2)": lambda v: v.reshape(-1, 2),
    "reshape((size,))": lambda v: v.reshape((v.size,)),
    "resize(larger)": _in_place("resize", (3, 5), refcheck=False),
    "resize(smaller)": _in_place("resize", 3, refcheck=False),
    "resize(())": _in_place("resize", (), refcheck=False),
    "resize(negative)": _in_place("resize", (-1, 2), refcheck=False),
    "round(1)": lambda v: v.round(1),
    "round(-1)": lambda v: (v * 10).round(-1),
    "searchsorted": lambda v: np.sort(v.ravel()).searchsorted([0.5, 2.25, 9.0], side="right"),
    "sort(axis=0)": _in_place("sort", axis=0),
    "sort()": _in_place("sort"),
    "sort(axis=None)": _in_place("sort", axis=None),
    "squeeze": lambda v: v[:, :1].squeeze(axis=1),
    "std()": lambda v: v.std(),
    "std(ddof=1)": lambda v: v.std(axis=1, ddof=1),
    "sum(axis=0)": lambda v: v.sum(axis=0),
    "sum(dtype)": lambda v: v.sum(axis=1, dtype=np.float32),
    "sum(keepdims)": lambda v: v.sum(keepdims=True),
    "swapaxes": lambda v: v.swapaxes(0, 1),
    "take()": lambda v: v.take([1, -1, 4]),
    "take() of 2-d indices": lambda v: v.take([[0], [5]]),
    "take(axis=0)": lambda v: v.take([0, -1, 0], axis=0),
    "take(axis=1)": lambda v: v.take([[1, 0]], axis=1),
    "to_device": lambda v: v.to_device(v.device),
    "transpose()": lambda v: v.transpose(),
    "transpose(1, 0)": lambda v: v.transpose(1, 0),
    "transpose((1, 0))": lambda v: v.transpose((1, 0)),
    "var(axis=0)": lambda v: v.var(axis=0),
    "view()": lambda v: v.view(),
    "view(int64)": lambda v: v.view(np.int64),
    "view(uint64) write": lambda v: (v.view(np.uint64).__setitem__((0, 0), 0), v)[1],
    "flat[...]": lambda v: v.flat[...],
    "flat[slice]": lambda v: v.flat[1:7:2],
    "flat[-slice]": lambda v: v.flat[::-3],
    "flat[list]": lambda v: v.flat[[0, -1, 3]],
    "flat[2-d list]": lambda v: v.flat[[[1], [2]]],
    "flat[mask]": lambda v: v.flat[np.arange(v.size) % 2 == 0],
    "flat[out of bounds]": lambda v: v.flat[[v.size]],
    "flat[two indices]": lambda v: v.flat[1, 2],
    "flat copy": lambda v: v.flat.copy(),
    "flat = cyclic": lambda v: (v.flat.__setitem__(slice(None, None, 2), [-1.0, -2.0, -3.0]), v)[1],
    "flat = all": lambda v: (v.flat.__setitem__(Ellipsis, np.arange(v.size)), v)[1],
    "flat = one": lambda v: (v.flat.__setitem__(-2, 7.0), v)[1],
    "flat = duplicates": lambda v: (v.flat.__setitem__([1, 1], [5.0, 6.0]), v)[1],
    "flat = two for one": lambda v: (v.flat.__setitem__(0, [5.0, 6.0]), v)[1],
    "flat = of transpose": lambda v: (v.T.flat.__setitem__([0, 1, 2], 9.0), v)[1],
    "flat attribute": lambda v: (setattr(v, "flat", [1.0, 2.0]), v)[1],
    "real attribute": lambda v: (lambda c: (setattr(c, "real", 1.0), c)[1])(v + 2j * v),
    "imag attribute": lambda v: (lambda c: (setattr(c, "imag", v), c)[1])(v + 2j * v),
    "imag attribute of real": lambda v: (setattr(v, "imag", 1.0), v)[1],
}

# Python values: (NumPy array or DTensor) -> a Python object, equal to NumPy's and of its type.
PYTHON_CALLS: dict[str, Callable[[Any], Any]] = {
    "item(flat)": lambda v: v.item(4),
    "item(-1)": lambda v: v.item(-1),
    "item(i, j)": lambda v: v.item(1, 2),
    "item((i, j))": lambda v: v.item((1, -1)),
    "item of one element": lambda v: v[:1, :1].item(),
    "item of many": lambda v: v.item(),
    "item(out of bounds)": lambda v: v.item(v.size),
    "item(wrong count)": lambda v: v.item(0, 0, 0),
    "item(float)": lambda v: v.item(1.5),
    "item of int": lambda v: (v * 4).astype(np.int64).item(2),
    "item of bool": lambda v: (v > 2).item(3),
    "tolist": lambda v: v.tolist(),
    "tolist of 0-d": lambda v: v[1, 1].tolist() if isinstance(v, dt.DTensor) else np.asarray(v[1, 1]).tolist(),
    "tobytes": lambda v: v.tobytes(),
    "tobytes(F)": lambda v: v.tobytes("F"),
    "tobytes(A) of transpose": lambda v: v.T.tobytes("A"),
    "itemsize": lambda v: v.itemsize,
    "nbytes": lambda v: v.nbytes,
    "ndim": lambda v: v.ndim,
    "shape": lambda v: v.shape,
    "size": lambda v: v.size,
    "dtype": lambda v: v.dtype,
    "base": lambda v: (v.base is None, v[1:].base is v, v.T.base is v, v.T[0].base is v, v.copy().base is None),
    "flags": lambda v: tuple((f.c_contiguous, f.f_contiguous, f.owndata, f.writeable, f.aligned,
                              f.writebackifcopy, f.behaved, f.carray, f.farray, f.fnc, f.forc, f.num,
                              f["C"], f["FORTRAN"], f["W"], f["FNC"])
                             for f in (v.flags, v.T.flags, v[:, ::2].flags, v[:1].flags,
                                       np.broadcast_to(v, v.shape).flags, v.T.copy().flags)),
    "flags unknown key": lambda v: v.flags["U"],
    "flat len": lambda v: len(v.flat),
    "flat[i]": lambda v: float(v.flat[5]),
    "flat[-i]": lambda v: float(v.flat[-1]),
    "flat[True]": lambda v: float(v.flat[True]),
    "flat base": lambda v: v.flat.base is v,
    "len": lambda v: len(v),
    "len of 0-d": lambda v: len(v[0, 0]),
    "in": lambda v: (v[1, 1] * 1.0).item() in v,
    "not in": lambda v: -1.0 in v,
    "in row": lambda v: [float(c) for c in v[0]] in v,
    "bool of one": lambda v: bool(v[:1, :1] > 0),
    "bool of many": lambda v: bool(v > 0),
    "float of one": lambda v: float(v[-1:, -1:]),
    "round of 0-d": lambda v: round(v[0, 0] * 7),
    "round of 0-d int": lambda v: round((v * 4).astype(np.int64)[0, 1]),
    "round of 0-d (ndigits)": lambda v: float(round(v[0, 0] / 3, 2)),
    "round of 0-d int (ndigits)": lambda v: int(round((v * 4).astype(np.int64)[0, 1], -1)),
    "round of array": lambda v: round(v),
    "round of bool": lambda v: round(v[0, 0] > 0),
    "round of complex": lambda v: round(v[0, 0] * 1j),
    "format of 0-d": lambda v: format(v[0, 1], ".3f"),
    "format of 0-d (empty)": lambda v: f"{v[0, 1]}",
    "format of float32 0-d": lambda v: f"{v.astype(np.float32)[0, 0] / 3}",
    "format of array with spec": lambda v: format(v, ".2f"),
    "str of 0-d": lambda v: str(v[0, 1]).split(" (placements")[0],
    "iteration of 0-d": lambda v: list(v[0, 0]),
}


def _same_python(checks: Checks, ctx: str, numpy_call: Callable[[], Any], dtensor_call: Callable[[], Any]) -> None:
    """A Python value equal to NumPy's and of its type, or the same kind of error."""
    try:
        want = numpy_call()
    except Exception as exc:  # noqa: BLE001 - NumPy refuses: so must the DTensor
        kind = next((k for k in (IndexError, ValueError, TypeError, KeyError) if isinstance(exc, k)), type(exc))
        try:
            dtensor_call()
        except kind:
            return
        except Exception as got:  # noqa: BLE001
            checks.errors.append(f"{ctx}: NumPy raised {exc!r}, the DTensor {got!r}")
            return
        checks.errors.append(f"{ctx}: NumPy raised {exc!r}, the DTensor nothing")
        return
    try:
        got = dtensor_call()
    except Exception as exc:  # noqa: BLE001
        checks.errors.append(f"{ctx}: raised {exc!r}; NumPy gave {want!r}")
        return
    checks.expect(type(got) is type(want) and got == want, f"{ctx}: {got!r} != NumPy's {want!r}")


def _numpy_repr(a: np.ndarray) -> str:
    """NumPy's repr of ``a`` as it would print a subclass named DTensor (``DTensor(`` for ``array(``)."""
    return np.array_repr(a.view(type("DTensor", (np.ndarray,), {})))


def _words(text: str) -> str:
    return " ".join(text.split())


def _values_part(text: str) -> str:
    """A repr up to its extras (``shape=``, ``dtype=``, ``placements=``): the values, as NumPy wraps them."""
    found = [at for at in (text.find(k) for k in ("shape=", "dtype=", "placements=")) if at >= 0]
    return text[:min(found)].rstrip().rstrip(",") if found else text[:-1]


def _check_text(checks: Checks, ctx: str, x: Any, a: np.ndarray) -> None:
    """repr(x), str(x): NumPy's text of ``a`` with the placements and the mesh."""
    where = f"placements={placements_str(x.placements)}, mesh={x.mesh!r}"
    got, want = repr(x), _numpy_repr(a)
    checks.expect(_words(got) == _words(want)[:-1] + f", {where})" and _values_part(got) == _values_part(want),
                  f"{ctx} repr:\n{got}\nNumPy's:\n{want}")
    got, want = str(x), f"{np.array_str(a)} ({where})"
    checks.expect(got == want, f"{ctx} str:\n{got}\nexpected:\n{want}")


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2,))
@pytest.mark.filterwarnings("ignore:Indexing flat iterators:DeprecationWarning")  # x.flat[True], as NumPy's
def test_methods_and_builtins_match_numpy(world):
    checks = Checks(world)
    for where, a, x in _placed(world):
        for name, call in ARRAY_CALLS.items():
            checks.same(f"{where} x.{name}", lambda: call(a.copy()), lambda: call(x.copy()))
        for name, call in PYTHON_CALLS.items():
            _same_python(checks, f"{where} {name}", lambda: call(a.copy()), lambda: call(x.copy()))
        # builtins over rows (views) and over the elements of a 1-d array
        rows = list(x.copy())
        checks.expect(len(rows) == len(a) and all(isinstance(r, dt.DTensor) and r.base is not None for r in rows),
                      f"{where}: the rows of a 2-d array are views")
        for i, row in enumerate(rows):
            checks.same(f"{where} row {i}", lambda: a[i], lambda: row)
        line = x.ravel()
        with dt.comm_counter() as counter:
            values = list(line)
        checks.expect(counter.total <= 2, f"{where}: iterating a 1-d array made {counter} (one gather expected)")
        checks.expect([v.item() for v in values] == a.ravel().tolist() and all(v.ndim == 0 for v in values),
                      f"{where}: iteration gives the 0-d elements")
        for name, fold in (("sum", sum), ("max", max), ("min", min)):
            with dt.comm_counter() as counter:
                got = fold(line)
            checks.expect(counter.total <= 2, f"{where}: {name}(x) made {counter}")
            checks.same(f"{where} {name}(x)", lambda: fold(a.ravel()), lambda: got)
        checks.expect([v.item() for v in sorted(line, reverse=True)] == sorted(a.ravel().tolist(), reverse=True),
                      f"{where}: sorted(x)")
        checks.same(f"{where} abs", lambda: abs(-a), lambda: abs(-x))
        checks.same(f"{where} divmod", lambda: divmod(a, 0.75), lambda: divmod(x, 0.75))
        checks.same(f"{where} rdivmod", lambda: divmod(7.0, a), lambda: divmod(7.0, x))
        # a write while iterating is seen by the next elements, as in NumPy
        b, y = a.ravel().copy(), x.ravel().copy()
        for i, v in enumerate(y):
            if i + 1 < y.size:
                y[i + 1] = v * 2
        for i, v in enumerate(b):
            if i + 1 < b.size:
                b[i + 1] = v * 2
        checks.same(f"{where} writes while iterating", lambda: b, lambda: y)
        _check_text(checks, where, x, a)
        _check_text(checks, f"{where} float32 view", x.astype(np.float32)[1:], a.astype(np.float32)[1:])
    checks.finish()


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
def test_a_large_repr_gathers_only_its_corners(world):
    checks = Checks(world)
    mesh = _mesh(world)
    for shape, dtype, options in (((40, 30), "float64", {}), ((2000,), "int64", {}), ((12, 10, 11), "float32", {}),
                                  ((40, 30), "float64", {"edgeitems": 2, "precision": 3, "linewidth": 60}),
                                  ((30, 3), "float64", {"threshold": 50}), ((7, 9), "int32", {"edgeitems": 0,
                                                                                               "threshold": 5})):
        a = (np.arange(np.prod(shape)).reshape(shape) / 7).astype(dtype)
        with np.printoptions(**options):
            e = np.get_printoptions()["edgeitems"]
            corners = int(np.prod([min(n, 2 * e) for n in shape])) * a.itemsize if e else a.nbytes  # (edgeitems=0:
            # NumPy works the widths out from every value, so the whole array is gathered)
            for p in [Shard(d) for d in range(len(shape))] + [Replicate()]:
                x = dt.distribute_tensor(a, mesh, [p])
                with dt.comm_counter() as counter:
                    text = repr(x)
                moved = sum(counter.bytes.values())
                where = f"{shape} {dtype} {options} {p}"
                checks.expect(counter.total <= 3 and moved <= 2 * corners,
                              f"{where}: repr moved {moved} bytes in {counter} (corners: {corners} bytes)")
                if isinstance(p, Replicate):
                    checks.expect(counter.total == 0, f"{where}: repr of a replicated array made {counter}")
                want = _numpy_repr(a)
                tail = f", placements={placements_str(x.placements)}, mesh={mesh!r})"
                checks.expect(_words(text) == _words(want)[:-1] + tail and _values_part(text) == _values_part(want),
                              f"{where}:\n{text}\nNumPy's:\n{want}")
                checks.expect(str(x) == f"{np.array_str(a)} ({tail[2:-1]})", f"{where}: str\n{x}")
    checks.finish()


def test_repr_of_small_and_special_arrays():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(4.0).reshape(2, 2), mesh, [Shard(0)])
    assert repr(x) == ("DTensor([[0., 1.],\n         [2., 3.]], placements=S(0), mesh=DeviceMesh((2,)))")
    assert str(x) == "[[0. 1.]\n [2. 3.]] (placements=S(0), mesh=DeviceMesh((2,)))"
    empty = dt.distribute_tensor(np.zeros((0, 3), np.float32), mesh, [Shard(0)])
    assert _words(repr(empty)) == "DTensor([], shape=(0, 3), dtype=float32, placements=S(0), mesh=DeviceMesh((2,)))"
    assert repr(dt.distribute_tensor(np.zeros(0), mesh, [Replicate()])) == (
        "DTensor([], dtype=float64, placements=R, mesh=DeviceMesh((2,)))")
    scalar = dt.distribute_tensor(np.array(2.5), mesh, [Replicate()])
    assert repr(scalar) == "DTensor(2.5, placements=R, mesh=DeviceMesh((2,)))"
    assert f"{scalar}" == "2.5" and f"{scalar:>6.2f}" == "  2.50"
    partial = dt.distribute_tensor(np.arange(3), mesh, [dt.Partial()])
    assert repr(partial) == "DTensor([0, 1, 2], placements=P(sum), mesh=DeviceMesh((2,)))"
    mesh2 = dt.DeviceMesh((2, 2))
    y = dt.distribute_tensor(np.arange(6, dtype=np.int8).reshape(2, 3), mesh2, [Shard(0), Shard(1)])
    assert repr(y) == ("DTensor([[0, 1, 2],\n         [3, 4, 5]],\n        dtype=int8, placements=S(0)S(1), "
                       "mesh=DeviceMesh((2, 2)))")  # the extras on a line of their own, as NumPy puts too long ones
    assert repr(y.T) == repr(dt.distribute_tensor(np.arange(6, dtype=np.int8).reshape(2, 3).T.copy(), mesh2,
                                                  [Shard(1), Shard(0)]))


@pytest.mark.parametrize("name", sorted(REFUSED_ATTRIBUTES))
def test_refused_attributes_say_what_to_use(name):
    x = dt.distribute_tensor(np.ones((2, 2)), dt.DeviceMesh((2,)), [Shard(0)])
    reason = REFUSED_ATTRIBUTES[name]
    assert hasattr(np.ndarray, name)
    with pytest.raises(AttributeError) as raised:
        getattr(x, name)
    assert str(raised.value) == reason and f"x.{name}" in reason
    assert "x.to_local()" in reason or "x.flags" in reason or "x.view(dtype)" in reason or "x[...] = v" in reason
    assert not hasattr(x, name)
    assert ndarray_methods.REFUSED[f"ndarray.{name}"].reason == reason


def test_every_ndarray_attribute_is_covered_once():
    public = {f"ndarray.{a}" for a in dir(np.ndarray) if not a.startswith("_")}
    cases = {n for n in ndarray_methods.CASES if n.startswith("ndarray.")}
    refused = set(ndarray_methods.REFUSED)
    assert cases | refused == public and not cases & refused
    x = dt.distribute_tensor(np.ones((2, 2)), dt.DeviceMesh((1,)), [Replicate()])
    for name in cases:
        attribute = name.split(".", 1)[1]
        assert hasattr(x, attribute), attribute
        method = getattr(dt.DTensor, attribute)
        doc = method.__doc__ if not isinstance(method, property) else method.fget.__doc__
        assert doc, f"DTensor.{attribute} has no docstring"


def test_flags_and_flat_are_read_only_objects():
    x = dt.distribute_tensor(np.zeros((2, 3)), dt.DeviceMesh((2,)), [Shard(0)])
    flags = x.flags
    assert isinstance(flags, Flags) and isinstance(x.flat, FlatIter)
    with pytest.raises(ValueError, match="setflags"):
        flags.writeable = False
    with pytest.raises(ValueError, match="setflags"):
        flags["W"] = False
    assert repr(flags) == repr(np.zeros((2, 3)).flags) and flags == x.copy().flags and flags != x.T.flags
    with pytest.raises(AttributeError, match="cannot set 'shape'"):
        x.shape = (3, 2)


def test_resize_refuses_what_numpy_refuses():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(6.0), mesh, [Shard(0)])
    view = x[1:]
    with pytest.raises(ValueError, match="referenced"):
        x.resize(8)
    with pytest.raises(ValueError, match="does not own its data"):
        view.resize(2, refcheck=False)
    with pytest.raises(ValueError, match="single-segment"):  # an owner in neither C nor Fortran order
        np.exp(dt.distribute_tensor(np.zeros((2, 3, 4)), mesh, [Shard(2)]).transpose(1, 0, 2)).resize(2, refcheck=False)
    del view
    x.resize(8)
    assert x.full_tensor().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]
    x.resize()
    x.resize(None)
    assert x.shape == (8,)
    f = np.copy(dt.distribute_tensor(np.arange(6.0).reshape(2, 3), mesh, [Shard(1)]), order="F")
    a = np.arange(6.0).reshape(2, 3).copy(order="F")
    f.resize((4, 2))
    a.resize((4, 2))
    assert f.full_tensor().tolist() == a.tolist() and f.flags.f_contiguous and not f.flags.c_contiguous


def test_view_dtype_writes_through_and_refuses_what_it_cannot():
    mesh = dt.DeviceMesh((2,))
    a = np.arange(8.0).reshape(2, 4)
    x = dt.distribute_tensor(a, mesh, [Shard(1)])
    with pytest.raises(dt.ShardingError, match="sharded"):
        x.view(np.float32)  # the last dim would change length
    rows = dt.distribute_tensor(a, mesh, [Shard(0)])
    halves = rows.view(np.float32)
    assert halves.shape == (2, 8) and halves.base is rows
    halves[1, :2] = halves[0, :2]
    b = a.copy()
    b.view(np.float32)[1, :2] = b.view(np.float32)[0, :2]
    assert rows.full_tensor().tolist() == b.tolist()
    with pytest.raises(TypeError, match="another array type"):
        x.view(np.ndarray)
    with pytest.raises(TypeError, match="numeric and bool"):
        x.view("datetime64[s]")
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        rows.T.view(np.float32)
    with pytest.raises(ValueError, match="0d array"):
        rows[0, 0].view(np.float32)
    ro = np.broadcast_to(rows, rows.shape).view(np.int64)
    with pytest.raises(ValueError, match="read-only"):
        ro[0, 0] = 1


# -- index forms ----------------------------------------------------------------------------------------------------
def _index_forms(mesh: dt.DeviceMesh, a: np.ndarray) -> dict[str, tuple[Any, Any]]:
    """``name -> (NumPy's index, the DTensor's index)`` for every kind of index NumPy takes."""
    def rep(v: Any) -> Any:
        return dt.distribute_tensor(np.asarray(v), mesh, [Replicate()])

    def rows(v: Any) -> Any:
        return dt.distribute_tensor(np.asarray(v), mesh, [Shard(0)])

    ix = np.ix_([0, 2, 3], [4, 1], [5])
    mask = a[:, :, 0] > 40
    same = {
        "range": range(1, 4), "negative range": range(3, 0, -2), "empty range": range(2, 2),
        "tuple with a range": (range(0, 4, 2), 1), "range after slice": (slice(None), range(1, 5, 3)),
        "range and ellipsis": (Ellipsis, range(0, 6, 2)), "range out of bounds": range(2, 6),
        "two ranges": (range(2), range(1, 3)), "nested lists": [[0, 1], [3, 3]],
        "nested list tuple": ([[0, 1], [2, 3]], [[1, 1], [0, 4]]), "list of ranges": [range(2), range(2)],
        "np.ix_": ix, "np.ix_ of a mask": np.ix_(np.array([1, 0, 1, 1], bool), [1, 3]),
        "negative steps": (slice(None, None, -2), slice(4, 0, -3), slice(None, None, -1)),
        "big negative step": (slice(10, -10, -3),), "None and ellipsis": (None, Ellipsis, None, 1),
        "ellipsis then None": (Ellipsis, None), "int None ellipsis": (1, None, Ellipsis),
        "advanced ellipsis advanced": ([0, 1], Ellipsis, [1, 2]),
        "separated advanced": ([0, 2], slice(None), [1, 3]), "None between advanced": ([0, 2], None, [1, 3]),
        "list of bools": [True, False, True, True], "numpy mask": mask, "numpy 0-d index": np.array(2),
        "bool scalar": True, "false": False, "empty tuple": (), "empty list": [],
        "negative ints": ([-1, -4], slice(None), [-6, 0]), "numpy ints": (np.int64(2), np.int32(1)),
        "float": (1.5,), "two ellipses": (Ellipsis, Ellipsis), "too many": (0, 0, 0, 0), "out of bounds": (4,),
        "list of slices": [slice(1, 3)], "bool and int lists": ([0, 1], [True, False, True, False, True]),
    }
    forms = {name: (index, index) for name, index in same.items()}
    forms.update({
        "np.ix_ of DTensors": (ix, np.ix_(rep([0, 2, 3]), rep([4, 1]), rep([5]))),
        "np.ix_ of a DTensor mask": (np.ix_([True, False, True, True], [0, 4]),
                                     np.ix_(rows(np.array([True, False, True, True])), [0, 4])),
        "np.ix_ of sharded DTensors": (np.ix_([3, 0, 2], [1]), np.ix_(rows([3, 0, 2]), rows([1]))),
        "DTensor ints": (np.array([[0, 3], [2, 2]]), rep([[0, 3], [2, 2]])),
        "sharded DTensor ints": (np.array([0, 3, 2, 2, 1]), rows([0, 3, 2, 2, 1])),
        "negative DTensor ints": (np.array([-1, 0, -2]), rows([-1, 0, -2])),
        "DTensor mask": (mask, rows(mask)),
        "DTensor mask on dim 1": ((slice(None), a[0, :, 0] > 10), (slice(None), rep(a[0, :, 0] > 10))),
        "0-d DTensor": (np.int64(2), rep(np.int64(2))), "0-d DTensor in a tuple": ((1, np.int64(2)),
                                                                                (1, rep(np.int64(2)))),
        "0-d DTensor bool": (np.True_, rep(np.True_)),
    })
    return forms


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
def test_every_index_form_reads_and_writes_as_numpy(world):
    checks = Checks(world)
    mesh = _mesh(world)
    a = np.arange(120.0).reshape(4, 5, 6)
    for p in (Shard(0), Shard(1), Shard(2), Replicate()):
        x = dt.distribute_tensor(a, mesh, [p])
        for name, (np_index, index) in _index_forms(mesh, a).items():
            where = f"{p} x[{name}]"
            checks.same(where, lambda: a[np_index], lambda: x[index])

            def write(target: Any, idx: Any) -> Any:
                target[idx] = -1.0
                return target

            checks.same(f"{where} = -1", lambda: write(a.copy(), np_index), lambda: write(x.copy(), index))
        y = x.copy()
        picked = y[range(1, 3)]
        picked[0] = 99.0  # a range indexes as an array: a copy, never a view (as in NumPy)
        checks.expect(picked.base is None and y.full_tensor()[1, 0, 0] == 30.0, f"{p}: x[range] is a copy")
    checks.finish()


# -- the methods whose NumPy functions another family implements -----------------------------------------------------
OTHERS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "argpartition": (np.argpartition, lambda v: v.argpartition(1, axis=0)[1]),
    "partition": (np.partition, lambda v: (v.partition(1, axis=1), v[:, 1])[1]),
    "choose": (np.choose, lambda v: (v > 2).astype(np.intp).choose([v, -v])),
    "compress": (np.compress, lambda v: v.compress([True, False, True], axis=1)),
    "put": (np.put, _in_place("put", [0, -1, 2], [9.0, 8.0])),
    "trace": (np.trace, lambda v: v.trace(offset=1)),
}


def _implemented(func: Any) -> bool:
    return rule_lookup(func) is not None or composite_of(func) is not None


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.skipif(
    not _implemented(f), reason=f"np.{f.__name__} takes no DTensor yet (another family implements it)"))
    for n, (f, _) in OTHERS.items()])
def test_methods_of_functions_from_other_families(world, name):
    checks = Checks(world)
    call = OTHERS[name][1]
    for where, a, x in _placed(world):
        checks.same(f"{where} x.{name}", lambda: call(a.copy()), lambda: call(x.copy()))
    checks.finish()


def test_method_signatures_are_numpys():
    import inspect

    skip = {"view", "reshape", "transpose", "resize", "item"}  # (*args: checked by the cases)
    for name in dir(np.ndarray):
        method = getattr(np.ndarray, name)
        if name.startswith("_") or name in skip or not callable(method) or name in REFUSED_ATTRIBUTES:
            continue
        ours = inspect.signature(getattr(dt.DTensor, name))
        theirs = inspect.signature(method)
        names = [p for p in theirs.parameters if p not in ("self", "kwargs")]
        assert [p for p in ours.parameters if p != "self"][:len(names)] == names, name
        for p in names:
            want, got = theirs.parameters[p].default, ours.parameters[p].default
            if want is not inspect.Parameter.empty:
                assert got == want or (want is np._NoValue and got is np._NoValue), (name, p, got, want)


def test_scalar_protocols_stay_numpys():
    # __index__ of a 0-d integer array indexes a list; a 1-d one refuses, as NumPy's
    x = dt.distribute_tensor(np.array([2]), dt.DeviceMesh((2,)), [Shard(0)])
    assert operator.index(x[0]) == 2 and [10, 20, 30][x[0]] == 30
    with pytest.raises(TypeError, match="only integer scalar arrays"):
        operator.index(x)


@pytest.mark.parametrize("dtype", ["int8", "int16", "float32", "float64", "complex64", "complex128", "bool"])
def test_byteswap_of_arrays_without_one(dtype):
    """CuPy arrays have no ``byteswap``: ``swap_bytes`` reverses the bytes itself (a NumPy subclass hiding it)."""
    from dtensor_np.dtensor import swap_bytes

    class Bare(np.ndarray):
        @property
        def byteswap(self):  # noqa: D401 - hidden, as on a CuPy array
            raise AttributeError("byteswap")

    a = (np.arange(12).reshape(3, 4) * 7.25 + (3j * np.arange(12).reshape(3, 4) if "complex" in dtype else 0))
    a = a.astype(dtype)
    for array in (a, a[1, 2]):
        bare = np.asarray(array).view(Bare)
        assert not hasattr(bare, "byteswap")
        swapped = np.asarray(swap_bytes(bare)).view(np.ndarray)
        assert swapped.shape == np.shape(array) and swapped.tobytes() == np.asarray(array).byteswap().tobytes()
