"""Every cache is registered (``memo``, ``BoundedCache``), ``dt.clear_caches``/``dt.cache_info`` reach them all, and the
dispatch fast path's keys are built in one place (``fast_path.call_key``), whichever door a call comes in by."""

from __future__ import annotations

import ast
import operator
from pathlib import Path

import numpy as np
import pytest

import dtensor_np as dt
from collectives import static_key
from dtensor_np import Replicate, Shard
from dtensor_np import dtensor as dtensor_module
from dtensor_np.fast_path import FAST_PATH, call_key
from dtensor_np.indexing import GETITEM, UPDATE

ROOT = Path(__file__).resolve().parent.parent


def _cache_decorators(path: Path) -> list[str]:
    """``lru_cache``/``functools.cache`` uses and unnamed ``BoundedCache`` tables in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("lru_cache", "cache") and \
                isinstance(node.value, ast.Name) and node.value.id == "functools":
            found.append(f"{path.name}:{node.lineno} functools.{node.attr}")
        if isinstance(node, ast.Name) and node.id == "lru_cache":
            found.append(f"{path.name}:{node.lineno} lru_cache")
    return found


def test_no_cache_escapes_the_registry():
    found = []
    for package in ("dtensor_np", "collectives"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name != "caches.py":
                found += _cache_decorators(path)
    assert found == []


def test_clear_caches_empties_every_cache_and_cache_info_reports_them():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(12.0).reshape(4, 3), mesh, [Shard(0)])
    _ = (x + x).redistribute([Replicate()]).sum(axis=0)
    info = dt.cache_info()
    for name in ("dtensor_np.fast_path", "dtensor_np.rule_decisions", "dtensor_np.plans",
                 "dtensor_np.redistribute_runners", "collectives.prepared_calls"):
        assert info[name]["entries"] > 0, name
    assert all(set(v) == {"hits", "misses", "entries", "maxsize", "persistent"} for v in info.values())
    dt.clear_caches()
    left = {n: v["entries"] for n, v in dt.cache_info().items() if v["entries"] and not v["persistent"]}
    assert left == {}
    np.testing.assert_array_equal((x + x).full_tensor(), 2 * np.arange(12.0).reshape(4, 3))  # only time was lost


def _doors(x, w):
    """Every door into the fast path: (what the call is, its head and arguments as call_key sees them, the call)."""
    return [
        ("x + w", np.add, (x, w), lambda: x + w),
        ("w - x", np.subtract, (w, x), lambda: w - x),
        ("x * 2.0", np.multiply, (x, 2.0), lambda: x * 2.0),
        ("3 * x", np.multiply, (3, x), lambda: 3 * x),
        ("x @ w", np.matmul, (x, w), lambda: x @ w),
        ("np.exp(x)", np.exp, (x,), lambda: np.exp(x)),
        ("np.sum(x, axis=0)", np.sum, (x,), lambda: np.sum(x, axis=0)),
        ("x.T", np.transpose, (x,), lambda: x.T),
        ("x[1]", GETITEM, (x, 1), lambda: x[1]),
        ("x[1:3, ::-1]", GETITEM, (x, (slice(1, 3), slice(None, None, -1))), lambda: x[1:3, ::-1]),
    ]


@pytest.mark.parametrize("case", range(10))
def test_every_door_keys_its_entry_with_call_key(case):
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(16.0).reshape(4, 4), mesh, [Shard(0)])
    w = dt.distribute_tensor(np.ones((4, 4)), mesh, [Replicate()])
    name, head, args, call = _doors(x, w)[case]
    kwargs = {"axis": 0} if "axis" in name else None
    dt.clear_caches()
    first = call()
    assert FAST_PATH.get(call_key(head, args, kwargs)) is not None, name
    assert len(FAST_PATH) == 1, (name, list(FAST_PATH))
    again = call()
    np.testing.assert_array_equal(again.full_tensor(), first.full_tensor())


def test_item_assignment_keys_its_entry_with_call_key():
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.arange(8.0), mesh, [Shard(0)])
    dt.clear_caches()
    x[5] = -1.0
    assert FAST_PATH.get(call_key(UPDATE, (x, 5, -1.0, "set"))) is not None
    y = dt.distribute_tensor(np.arange(8.0), mesh, [Shard(0)])
    hits = dt.cache_info()["dtensor_np.fast_path"]["hits"]
    y[5] = -1.0
    assert dt.cache_info()["dtensor_np.fast_path"]["hits"] == hits + 1
    np.testing.assert_array_equal(y.full_tensor(), np.where(np.arange(8) == 5, -1.0, np.arange(8.0)))


def test_a_first_operator_call_builds_its_key_once(monkeypatch):
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.ones((4, 3)), mesh, [Shard(0)])
    w = dt.distribute_tensor(np.ones((3, 2)), mesh, [Replicate()])
    built = []

    def counting(head, args, kwargs=None):
        built.append(head)
        return call_key(head, args, kwargs)

    monkeypatch.setattr(dtensor_module, "call_key", counting)
    dt.clear_caches()
    _ = x @ w
    assert built == [np.matmul]


def test_item_assignment_runs_through_the_rule_registry():
    seen = []
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.zeros((4, 2)), mesh, [Shard(0)])
    dt.clear_caches()
    with dt.dispatch.observing_rules(lambda rule: seen.append(rule.name)):
        x[1:3] = 5.0
        _ = x.at[0].add(1.0)
    assert seen == ["setitem", "setitem"]
    assert dt.propagation.rule_for(operator.setitem) is UPDATE


def test_a_cached_call_never_lets_an_argument_of_another_type_through():
    """A value equal as a Python value but of another type is a new key: validated again, as NumPy validates it."""
    mesh = dt.DeviceMesh((2,))
    x = dt.distribute_tensor(np.ones((4, 3)), mesh, [Shard(0)])
    for _ in range(2):
        assert np.sum(x, axis=1).shape == (4,)
    with pytest.raises(TypeError):
        np.sum(x, axis=1.0)
    with pytest.raises(TypeError):
        np.sum(np.ones((4, 3)), axis=1.0)  # NumPy refuses it too
    assert static_key(1) != static_key(1.0) != static_key(True) and static_key(0.0) != static_key(-0.0)


@pytest.mark.parametrize("placement", [Shard(0), Replicate()])
def test_a_key_never_stands_for_a_value_it_does_not_name(placement):
    """A 0-d DTensor index or value is replaced by its value, a list value by an array: such calls keep no entry
    (their key names the DTensor's spec or the list, not the value that runs). Found by scikit-learn's
    GaussianMixture: ``v[i, i] = d[i]`` in a loop set every diagonal entry to the first one."""
    mesh = dt.DeviceMesh((2,))
    full = np.arange(12.0).reshape(4, 3)
    x = dt.distribute_tensor(full, mesh, [placement])
    for _ in range(2):
        for i in (1, 3, 0):
            index = dt.distribute_tensor(np.array(i), mesh, [Replicate()])
            np.testing.assert_array_equal(x[index].full_tensor(), full[i])
    y, want = x.copy(), full.copy()
    d = dt.distribute_tensor(np.array([5.0, 6.0, 7.0]), mesh, [Replicate()])
    for i in range(3):
        y[i, i] = d[i]
        want[i, i] = 5.0 + i
    for row, values in ((2, [1.0, 2.0, 3.0]), (3, [4.0, 5.0, 6.0])):
        y[row] = values
        want[row] = values
    np.testing.assert_array_equal(y.full_tensor(), want)
