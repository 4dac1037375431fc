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


# (name, a good call, the same call with an argument of another type) on ``x``, a (4, 6) DTensor, and ``np``:
# every cached call that issue 40 found letting a retyped argument through after a good call.
RETYPED = (
    ("transpose", lambda x: np.transpose(x, (1, 0)), lambda x: np.transpose(x, (1.0, 0))),
    ("transpose bool", lambda x: np.transpose(x, (1, 0)), lambda x: np.transpose(x, (True, 0))),
    ("concatenate", lambda x: np.concatenate([x, x], axis=0), lambda x: np.concatenate([x, x], axis=0.0)),
    ("stack", lambda x: np.stack([x, x], axis=0), lambda x: np.stack([x, x], axis=0.0)),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 1), lambda x: np.swapaxes(x, 0.0, 1)),
    ("moveaxis", lambda x: np.moveaxis(x, 0, 1), lambda x: np.moveaxis(x, 0.0, 1)),
    ("expand_dims", lambda x: np.expand_dims(x, 0), lambda x: np.expand_dims(x, 0.0)),
    ("squeeze", lambda x: np.squeeze(x[:, :1], 1), lambda x: np.squeeze(x[:, :1], 1.0)),
    ("tensordot", lambda x: np.tensordot(x, x, axes=([1], [1])), lambda x: np.tensordot(x, x, axes=([1.0], [1]))),
    ("repeat", lambda x: np.repeat(x, 2, axis=0), lambda x: np.repeat(x, 2, axis=0.0)),
    ("round", lambda x: np.round(x, 1), lambda x: np.round(x, 1.0)),
    ("sum axis", lambda x: np.sum(x, axis=1), lambda x: np.sum(x, axis=1.0)),
    ("sum keepdims", lambda x: np.sum(x, axis=0, keepdims=1), lambda x: np.sum(x, axis=0, keepdims=1.0)),
    ("argmax axis", lambda x: np.argmax(x, axis=0), lambda x: np.argmax(x, axis=(0, 1))),
    ("cumsum", lambda x: np.cumsum(x, axis=0), lambda x: np.cumsum(x, axis=0.0)),
    ("reshape", lambda x: x.reshape(2, 12), lambda x: x.reshape(2.0, 12)),
    ("index", lambda x: x[1], lambda x: x[1.0]),
    ("redistribute shard_order", lambda x: x.redistribute([Shard(0)], shard_order=((0, (0,)),)),
     lambda x: x.redistribute([Shard(0)], shard_order=((0.0, (0,)),))),
)


def _family(exc: BaseException) -> str:
    """The exception family NumPy's callers catch: TypeError, IndexError or ValueError (else the class's name)."""
    return next((f.__name__ for f in (TypeError, IndexError, ValueError) if isinstance(exc, f)), type(exc).__name__)


def retyped_outcomes(warm: bool) -> dict[str, list[str]]:
    """Each retyped call's outcome on a 2-rank mesh, per placement of ``x``: after its good call twice (``warm``), or
    with every cache empty (each case after ``dt.clear_caches()``; the first one in a new process is cold anyway)."""
    mesh = dt.DeviceMesh((2,))
    full = np.arange(24.0).reshape(4, 6)
    outcomes: dict[str, list[str]] = {}
    for name, good, retyped in RETYPED:
        for placement in (Shard(0), Shard(1), Replicate()):
            x = dt.distribute_tensor(full, mesh, [placement])
            dt.clear_caches()
            if warm:
                good(x)
                good(x)
            try:
                got = retyped(x)
                outcome = ["value", repr(np.asarray(got.full_tensor() if isinstance(got, dt.DTensor) else got).tolist())]
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                outcome = [type(exc).__name__, str(exc), _family(exc)]
            outcomes[f"{name} {placement}"] = outcome
    return outcomes


def test_a_retyped_argument_after_a_good_call_has_the_outcome_of_a_fresh_process():
    """Issue 40's must-show: every cached call, repeated with a type-changed argument after a good call, raises (or
    returns) exactly what it does in a fresh process, and raises where NumPy raises."""
    import json
    import subprocess
    import sys

    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_caches; "
            "print(json.dumps(test_caches.retyped_outcomes(warm=False)))")
    fresh = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      timeout=300).stdout.splitlines()[-1])
    warm = retyped_outcomes(warm=True)
    assert warm == fresh, {k: (warm[k], fresh.get(k)) for k in warm if warm[k] != fresh.get(k)}
    full = np.arange(24.0).reshape(4, 6)
    for name, _, retyped in RETYPED[:-1]:  # (redistribute has no NumPy counterpart)
        with pytest.raises(Exception) as numpy_error:  # noqa: PT011 - NumPy's own exception, whichever it is
            retyped(full)
        for key, outcome in warm.items():
            if key.rsplit(" ", 1)[0] == name:
                assert outcome[0] != "value" and outcome[2] == _family(numpy_error.value), (key, outcome, numpy_error.value)
