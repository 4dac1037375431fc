"""NumPy's view semantics on DTensors, against NumPy: views, writes through them and through their bases.

* A differential state machine (hypothesis ``RuleBasedStateMachine``): random
  sequences of taking views (every kind dtensor_np follows: basic indexes,
  ``.T``, ``transpose``, ``swapaxes``, ``moveaxis``, ``mT``, ``reshape``,
  ``ravel``, ``squeeze``, ``expand_dims``, ``flip``, ``real``, rows of
  iteration, ``split`` pieces, and the read-only ``diagonal`` and
  ``broadcast_to``; views of views), writing through views and bases (item
  assignment with basic and advanced indexes, in-place operators, ``out=``,
  ``fill``, ``sort``, ``copyto``), taking copies (``x.copy()``, ``np.copy``,
  fancy indexing) and reading every live array, run on NumPy arrays and on
  DTensors with random placements (uneven and empty shards), simulated on 1 to
  4 ranks and under ``mpiexec -n 2`` and ``-n 4``.  After every step every live
  DTensor's blocks equal its NumPy twin's, on every rank (no gather), and every
  write NumPy refuses raises the same exception.  ``DTENSOR_NP_DEEP=1`` runs it
  longer (the README's note gives the command and its result).
* Each idiom of issue 36 as a test, on rows sharded, columns sharded and
  replicated.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import dtensor_np as dt
from strategies import world_meshes
from dtensor_np import Replicate, Shard
from dtensor_np.testing import assert_dtensor_equal, raises_on_all_ranks

DEEP = os.environ.get("DTENSOR_NP_DEEP", "") not in ("", "0")


_meshes = world_meshes  # one 1-D mesh, and a 2-D one from 4 ranks on


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _blocks_equal(x: Any, twin: np.ndarray) -> list[str]:
    """Every held rank's shard of ``x`` against its block of ``twin`` (shape, dtype and values, exactly)."""
    errors = []
    if x.shape != twin.shape or x.dtype != twin.dtype:
        return [f"{x.shape} {x.dtype} != NumPy's {twin.shape} {twin.dtype}"]
    for r, shard in x.shards.items():
        shard = _host(shard)
        block = twin[x.spec.local_index(r)]
        if any(str(p).startswith("P") for p in x.placements):
            block = None  # a pending sum: compared whole below
        if block is not None and (shard.shape != block.shape or not np.array_equal(shard, block, equal_nan=True)):
            errors.append(f"rank {r}: {shard.tolist()} != NumPy's {block.tolist()}")
    if any(str(p).startswith("P") for p in x.placements) and not np.array_equal(_host(x.full_tensor()), twin,
                                                                                 equal_nan=True):
        errors.append(f"{_host(x.full_tensor()).tolist()} != NumPy's {twin.tolist()}")
    return errors


def _agree(world: Any, errors: list[str]) -> None:
    """Every rank fails together, with every rank's messages."""
    if world.kind == "mpi":
        every = world.backend.comm.allgather(errors)
        errors = [f"process {i}: {e}" for i, es in enumerate(every) for e in es]
    assert not errors, "\n".join(errors[:10])


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - compared with NumPy's outcome
        return type(e).__name__, e


@st.composite
def _basic_index(draw: Any, shape: tuple[int, ...]) -> Any:
    items: list[Any] = []
    dims = list(shape)
    ellipsis_at = draw(st.one_of(st.none(), st.integers(0, len(dims))))
    for d, n in enumerate(dims):
        if ellipsis_at == d:
            items.append(Ellipsis)
        if draw(st.integers(0, 9)) == 0:
            items.append(None)
        kind = draw(st.sampled_from(["int", "slice", "slice", "all"])) if n else draw(st.sampled_from(["slice", "all"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
            items.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, -1, -2]))))
        else:
            items.append(slice(None))
    if ellipsis_at == len(dims):
        items.append(Ellipsis)
    if ellipsis_at is not None and draw(st.booleans()):  # what the ellipsis covers, dropped
        at = items.index(Ellipsis)
        covered = draw(st.integers(0, len(items) - at - 1))
        del items[at + 1:at + 1 + covered]
    return tuple(items) if len(items) != 1 or draw(st.booleans()) else items[0]


class ViewMachine(RuleBasedStateMachine):
    """The state machine of the module docstring; ``world`` is set by the test that runs it."""

    world: Any = None
    device: Any = None  # None: NumPy shards; the cupy module: CuPy shards
    arrays = Bundle("arrays")

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[tuple[np.ndarray, Any, str]] = []

    def _add(self, twin: np.ndarray, x: Any, how: str) -> tuple[np.ndarray, Any, str]:
        pair = (twin, x, how)
        self.pairs.append(pair)
        return pair

    @initialize(target=arrays, data=st.data())
    def base(self, data: Any) -> Any:
        mesh = data.draw(st.sampled_from(_meshes(self.world)), "mesh")
        shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3), "shape"))
        complex_ = data.draw(st.integers(0, 5)) == 0
        twin = np.arange(np.prod(shape), dtype=float).reshape(shape) - 3.5
        if complex_:
            twin = twin + 1j * (twin + 10)
        options = [Replicate()] + [Shard(d) for d in range(len(shape))]
        placements = [data.draw(st.sampled_from(options), "placement") for _ in range(mesh.ndim)]
        full = twin if self.device is None else self.device.asarray(twin)
        return self._add(twin, dt.distribute_tensor(full, mesh, placements), f"base {shape} {placements}")

    # -- views ---------------------------------------------------------------------------------------
    @rule(target=arrays, pair=arrays, data=st.data())
    def view(self, pair: Any, data: Any) -> Any:
        twin, x, how = pair
        ndim = twin.ndim
        kinds = ["index", "T", "transpose", "reshape", "ravel", "expand_dims", "flip", "real", "broadcast_to"]
        if ndim >= 2:
            kinds += ["swapaxes", "moveaxis", "mT", "diagonal", "row"]
        if ndim and twin.shape[0]:
            kinds += ["split"]
        if 1 in twin.shape:
            kinds += ["squeeze"]
        kind = data.draw(st.sampled_from(kinds), "view kind")
        if kind == "index":
            index = data.draw(_basic_index(twin.shape), "index")
            make = lambda a: a[index]  # noqa: E731
        elif kind == "T":
            make = lambda a: a.T  # noqa: E731
        elif kind == "transpose":
            axes = tuple(data.draw(st.permutations(range(ndim)), "axes"))
            make = lambda a: a.transpose(axes)  # noqa: E731
        elif kind == "swapaxes":
            i, j = data.draw(st.integers(-ndim, ndim - 1)), data.draw(st.integers(-ndim, ndim - 1))
            make = lambda a: np.swapaxes(a, i, j)  # noqa: E731
        elif kind == "moveaxis":
            i, j = data.draw(st.integers(0, ndim - 1)), data.draw(st.integers(0, ndim - 1))
            make = lambda a: np.moveaxis(a, i, j)  # noqa: E731
        elif kind == "mT":
            make = lambda a: a.mT  # noqa: E731
        elif kind == "reshape":
            size = twin.size
            divisors = [d for d in range(1, size + 1) if size % d == 0] or [1]
            d = data.draw(st.sampled_from(divisors))
            new_shape = data.draw(st.sampled_from([(-1,), (d, -1), (-1, d), (1, -1)] if size else [(-1,), (0, 2)]))
            make = lambda a: a.reshape(new_shape)  # noqa: E731
        elif kind == "ravel":
            make = lambda a: a.ravel()  # noqa: E731
        elif kind == "expand_dims":
            axis = data.draw(st.integers(-ndim - 1, ndim))
            make = lambda a: np.expand_dims(a, axis)  # noqa: E731
        elif kind == "squeeze":
            make = lambda a: np.squeeze(a)  # noqa: E731
        elif kind == "flip":
            axis = data.draw(st.one_of(st.none(), st.integers(0, max(ndim - 1, 0))))
            make = lambda a: np.flip(a, axis)  # noqa: E731
        elif kind == "real":
            make = lambda a: a.real  # noqa: E731
        elif kind == "broadcast_to":
            make = lambda a: np.broadcast_to(a, (2,) + a.shape)  # noqa: E731
        elif kind == "diagonal":
            make = lambda a: a.diagonal()  # noqa: E731
        elif kind == "row":
            i = data.draw(st.integers(0, max(twin.shape[0] - 1, 0)))
            make = (lambda a: list(a)[i]) if twin.shape[0] else (lambda a: a[...])  # noqa: E731
        else:  # split
            n = twin.shape[0]
            sections = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
            piece = data.draw(st.integers(0, sections - 1))
            make = lambda a: np.split(a, sections)[piece]  # noqa: E731
        got_twin, got = _outcome(lambda: make(twin)), _outcome(lambda: make(x))
        _agree(self.world, [] if got_twin[0] == got[0] else [f"{kind} of {how}: NumPy {got_twin}, dtensor_np {got}"])
        if got[0] != "ok":
            return self._add(twin, x, how)
        made = got_twin[1]
        if not isinstance(made, np.ndarray):  # a scalar (an int for every dim): a 0-d copy, as dtensor_np's
            made = np.asarray(made)
        return self._add(made, got[1], f"{kind} of ({how})")

    @rule(target=arrays, pair=arrays, data=st.data())
    def copy(self, pair: Any, data: Any) -> Any:
        twin, x, how = pair
        kind = data.draw(st.sampled_from(["copy", "np.copy", "fancy"] if twin.ndim and twin.shape[0] else
                                         ["copy", "np.copy"]), "copy kind")
        if kind == "copy":
            return self._add(twin.copy(), x.copy(), f"copy of ({how})")
        if kind == "np.copy":
            return self._add(np.copy(twin), np.copy(x), f"np.copy of ({how})")
        rows = data.draw(st.lists(st.integers(0, twin.shape[0] - 1), min_size=1, max_size=3))
        return self._add(twin[rows], x[rows], f"fancy {rows} of ({how})")

    # -- writes ---------------------------------------------------------------------------------------
    @rule(pair=arrays, data=st.data())
    def write(self, pair: Any, data: Any) -> None:
        twin, x, how = pair
        kinds = ["setitem", "setitem", "iadd", "imul", "out", "fill", "copyto"]
        if twin.ndim and twin.dtype.kind == "f":
            kinds.append("sort")
        if twin.ndim and twin.shape[0]:
            kinds.append("setitem fancy")
        kind = data.draw(st.sampled_from(kinds), "write kind")
        value = float(data.draw(st.integers(-9, 9))) + 0.5
        if kind == "setitem":
            index = data.draw(_basic_index(twin.shape), "index")

            def act(a: Any) -> None:
                a[index] = value
        elif kind == "setitem fancy":
            rows = data.draw(st.lists(st.integers(-twin.shape[0], twin.shape[0] - 1), min_size=1, max_size=3))

            def act(a: Any) -> None:
                a[rows] = value
        elif kind == "iadd":
            def act(a: Any) -> None:
                a += value
        elif kind == "imul":
            def act(a: Any) -> None:
                a *= 2
        elif kind == "out":
            def act(a: Any) -> None:
                np.negative(a, out=a)
        elif kind == "fill":
            def act(a: Any) -> None:
                a.fill(value)
        elif kind == "copyto":
            def act(a: Any) -> None:
                np.copyto(a, value)
        else:
            axis = data.draw(st.integers(-twin.ndim, twin.ndim - 1))

            def act(a: Any) -> None:
                a.sort(axis=axis)
        done_twin, done = _outcome(lambda: act(twin)), _outcome(lambda: act(x))
        if os.environ.get("VDEBUG"): print("WRITE", kind, value, how, repr(twin), done_twin, done, x.full_tensor())
        _agree(self.world, [] if done_twin[0] == done[0] else
               [f"{kind} on {how}: NumPy {done_twin}, dtensor_np {done}"])

    @invariant()
    def every_live_array_equals_its_twin(self) -> None:
        errors = []
        for twin, x, how in self.pairs:
            errors += [f"{how}: {e}" for e in _blocks_equal(x, twin)]
        _agree(self.world, errors)


def _settings(world: Any) -> settings:
    if DEEP:
        examples, steps = (400, 50) if world.kind == "simulated" else (100, 40)
    else:
        examples, steps = (40, 20) if world.kind == "simulated" else (12, 16)
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=(2, 4))
def test_views_and_writes_follow_numpy(world):
    ViewMachine.world, ViewMachine.device = world, None
    run_state_machine_as_test(ViewMachine, settings=_settings(world))


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(2, 4), mpi=(2,))
def test_views_and_writes_follow_numpy_on_cupy_shards(world, cupy):
    ViewMachine.world, ViewMachine.device = world, cupy
    try:
        run_state_machine_as_test(ViewMachine, settings=_settings(world))
    finally:
        ViewMachine.device = None


# ---------------------------------------------------------------------------
# the idioms of issue 36, each on three placements
# ---------------------------------------------------------------------------
def _idiom_placements(mesh: dt.DeviceMesh) -> list[list[Any]]:
    return [[Shard(0)] * mesh.ndim, [Shard(1)] * mesh.ndim, [Replicate()] * mesh.ndim]


def _row_zeroing(a: Any) -> None:
    for row in a:
        row[:] = 0


IDIOMS: dict[str, Callable[[Any], Any]] = {
    "a[0][1] = 7": lambda a: a[0].__setitem__(1, 7),
    "a[:, 0][2] = 7": lambda a: a[:, 0].__setitem__(2, 7),
    "v = a[1:3]; v += 100": lambda a: a[1:3].__iadd__(100),
    "t = a.T; t *= 2": lambda a: a.T.__imul__(2),
    "a.reshape(-1)[0] = 99": lambda a: a.reshape(-1).__setitem__(0, 99),
    "r = a.ravel(); r[5] = -1": lambda a: a.ravel().__setitem__(5, -1),
    "for row in a: row[:] = 0": _row_zeroing,
    "np.negative(a[:2], out=a[:2])": lambda a: np.negative(a[:2], out=a[:2]),
    "w = a[1:][:, 1:]; w[0, 0] = -3": lambda a: a[1:][:, 1:].__setitem__((0, 0), -3),
    "v.copy() leaves a alone": lambda a: a[1:3].copy().__setitem__(0, 50),
}


@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2, 4))
@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_each_view_idiom_writes_its_base_as_numpy(world, idiom):
    errors = []
    for mesh in _meshes(world):
        for placements in _idiom_placements(mesh):
            twin = np.arange(20.0).reshape(5, 4)
            a = dt.distribute_tensor(twin, mesh, placements)
            IDIOMS[idiom](twin)
            IDIOMS[idiom](a)
            errors += [f"{placements}: {e}" for e in _blocks_equal(a, twin)]
    _agree(world, errors)


@pytest.mark.worlds(simulated=(1, 2, 4), mpi=(2,))
def test_a_view_taken_before_a_write_sees_it(world):
    for mesh in _meshes(world):
        for placements in _idiom_placements(mesh):
            twin = np.arange(20.0).reshape(5, 4)
            a = dt.distribute_tensor(twin, mesh, placements)
            v, tv = a[1:3], twin[1:3]
            a[1] = 5
            twin[1] = 5
            assert float(v.sum()) == float(tv.sum())
            _agree(world, _blocks_equal(v, tv))


@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_read_only_views_refuse_writes_as_numpy(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = dt.distribute_tensor(np.arange(16.0).reshape(4, 4), mesh, [Shard(0)])
    for make in (lambda x: x.diagonal(), lambda x: np.broadcast_to(x[0], (3, 4))):
        with pytest.raises(ValueError, match="read-only"):
            make(np.arange(16.0).reshape(4, 4))[0] = 1  # NumPy refuses
        with raises_on_all_ranks(ValueError, match="read-only"):
            make(a)[0] = 1
    assert_dtensor_equal(a, np.arange(16.0).reshape(4, 4), rtol=0)


@pytest.mark.worlds(simulated=(2,), mpi=(2,))
def test_base_copies_and_fancy_results(world):
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    a = dt.distribute_tensor(np.arange(12.0).reshape(4, 3), mesh, [Shard(0)])
    assert a.base is None and a[1:].base is a and a[1:][::2].base is a and a.T.base is a
    assert a.copy().base is None and a[[0, 1]].base is None and np.copy(a).base is None
    b = a[[0, 2]]
    b[0] = -1  # a copy: a keeps its values
    assert_dtensor_equal(a, np.arange(12.0).reshape(4, 3), rtol=0)
    e = np.exp(a.T)  # NumPy: the exp of a transpose is Fortran-ordered, so its reshape(-1) is a copy
    r = e.reshape(-1)
    r[0] = 0
    assert_dtensor_equal(e, np.exp(np.arange(12.0).reshape(4, 3).T))
    g = np.exp(a)  # C-ordered: its reshape(-1) is a view
    s = g.reshape(-1)
    s[0] = 0
    assert float(g[0, 0]) == 0.0
