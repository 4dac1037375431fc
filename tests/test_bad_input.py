"""The bad-input catalogue: every wrong call raises the right error, on every rank, and the ranks stay in step.

Each catalogue entry names a call, the error type it must raise and a
distinctive fragment of the message (what was expected and what was got).
``docs/errors.md`` lists every entry.  The entries are grouped into a few
tests (one per area) so the MPI cases start few jobs; every test takes the
``world`` fixture, so it runs simulated (1, 2, 3, 4, 8 ranks) and under
``mpiexec`` with 2 and 4 ranks.

How an entry is checked (``Catalogue``): the call runs inside
``pytest.raises(type, match=...)`` on every rank; the outcome of every rank
(passed, or what went wrong) is shared with one small ``allgather`` so every
rank sees every rank's result, the messages are compared across ranks, and
then one distribute + ``full_tensor`` proves the ranks are still in step.
Failures are collected, not raised, so one wrong entry never hides the
others and never leaves a rank behind; the test fails at the end with the
list.  Entries marked ``bug=`` (and ``# Regression:`` in the source) are
defects this catalogue found and that were fixed; the text says what the
library once did, and is shown if it ever comes back.

Calls that go wrong on ONE rank only (another rank's input is fine) would
hang a ``world`` test if the library forgets to tell the other ranks, so
they run in ``mpiexec`` subprocesses with a watchdog instead
(``test_bad_input_on_one_rank_raises_on_every_rank_without_a_hang``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pytest

import dtensor_np as dt
from collectives import CollectiveError
from dtensor_np import Partial, Replicate, Shard
from dtensor_np.placements import placements_str
from launching import MPIEXEC
from test_spmd_default import default_env
from strategies import per_rank

R = Replicate()
NAN, INF = np.nan, np.inf


# ---------------------------------------------------------------------------
# the catalogue checker
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One rank's result for one entry."""

    ok: bool
    detail: str  # what went wrong (empty when ok)
    error: str = ""  # type name of the exception raised, if any
    message: str = ""


def _attempt(fn: Callable[[], Any], exc_type: Any, match: str) -> Outcome:
    """Run ``fn`` under ``pytest.raises(exc_type, match=match)``; never raises."""
    try:
        with pytest.raises(exc_type, match=match) as info:
            fn()
    except pytest.fail.Exception:  # nothing was raised
        return Outcome(False, "raised nothing")
    except AssertionError as wrong:  # raised the right type, but the message does not match
        return Outcome(False, f"message does not match: {wrong}")
    except Exception as other:  # noqa: BLE001 - a wrong type is a result to report
        return Outcome(False, f"raised {type(other).__name__}: {other}", type(other).__name__, str(other))
    return Outcome(True, "", type(info.value).__name__, str(info.value))


def _expected_name(exc_type: Any) -> str:
    if isinstance(exc_type, tuple):
        return " or ".join(t.__name__ for t in exc_type)
    return exc_type.__name__


@dataclass
class Catalogue:
    """Runs catalogue entries on every rank of ``world``; collects failures; keeps the ranks in step."""

    world: Any
    failures: list[str] = field(default_factory=list)
    entries: int = 0

    def __post_init__(self) -> None:
        self.mesh = dt.DeviceMesh((self.world.size,), backend=self.world.kind)
        self.step = 0

    # -- communication between the test's ranks --------------------------------
    def gather(self, item: Any) -> list[Any]:
        """``item`` from every process (one process when simulated)."""
        if self.world.kind == "mpi":
            return self.world.backend.comm.allgather(item)
        return [item]

    def where(self, index: int) -> str:
        return f"MPI rank {index}" if self.world.kind == "mpi" else "the simulated process"

    # -- entries ----------------------------------------------------------------
    def raises(
        self,
        name: str,
        exc_type: Any,
        match: str,
        fn: Callable[[], Any],
        *,
        same_message: bool = True,
        bug: Optional[str] = None,
    ) -> None:
        """Entry: ``fn()`` raises ``exc_type`` with a message matching ``match`` on every rank."""
        self.entries += 1
        outcomes = self.gather(_attempt(fn, exc_type, match))
        problems = [f"{self.where(i)}: {o.detail}" for i, o in enumerate(outcomes) if not o.ok]
        if not problems and len({o.error for o in outcomes}) > 1:
            problems.append("the ranks raised different types: " + ", ".join(o.error for o in outcomes))
        if not problems and same_message and len({o.message for o in outcomes}) > 1:
            problems.append("the ranks' messages differ: " + " | ".join(repr(o.message) for o in outcomes))
        self._record(name, f"expected {_expected_name(exc_type)} matching {match!r}", problems, bug)

    def works(self, name: str, fn: Callable[[], Any], *, bug: Optional[str] = None) -> None:
        """Entry: ``fn()`` (which asserts on values) completes on every rank."""
        self.entries += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's own warnings (mean of empty, inf - inf)
                fn()
            outcome = Outcome(True, "")
        except Exception as e:  # noqa: BLE001
            outcome = Outcome(False, f"{type(e).__name__}: {e}"[:2000])
        problems = [f"{self.where(i)}: {o.detail}" for i, o in enumerate(self.gather(outcome)) if not o.ok]
        self._record(name, "expected to work and equal NumPy", problems, bug)

    def _record(self, name: str, expected: str, problems: list[str], bug: Optional[str]) -> None:
        if problems:
            tag = f" [regression: {bug}]" if bug else ""
            self.failures.append(f"{name}{tag}\n    {expected}; got:\n      " + "\n      ".join(problems))
        self.in_step(name)

    def in_step(self, after: str) -> None:
        """One distribute + full_tensor on every rank: the ranks are still in step after ``after``."""
        self.step += 1
        full = np.arange(2.0 * self.world.size + 1) + self.step
        try:
            got = dt.distribute_tensor(full, self.mesh, [Shard(0)]).full_tensor()
            detail = "" if np.array_equal(got, full) else f"full_tensor gave {got.tolist()}, expected {full.tolist()}"
        except Exception as e:  # noqa: BLE001
            detail = f"{type(e).__name__}: {e}"
        bad = [f"{self.where(i)}: {d}" for i, d in enumerate(self.gather(detail)) if d]
        if bad:
            pytest.fail(f"the ranks are out of step after {after!r}: " + "; ".join(bad))

    def finish(self) -> None:
        """The last collective, then fail with every entry that went wrong."""
        self.in_step("the last entry")
        if not self.failures:
            return
        head = f"{len(self.failures)} of {self.entries} catalogue entries failed on {self.world}"
        if self.world.kind == "mpi" and self.world.ranks[0] != 0:  # rank 0 prints every rank's details
            pytest.fail(head + " (details in rank 0's report): " + "; ".join(f.split("\n")[0] for f in self.failures),
                        pytrace=False)
        pytest.fail(head + ":\n" + "\n".join(self.failures), pytrace=False)


def two_d_mesh(world: Any) -> Optional[dt.DeviceMesh]:
    n = world.size
    return dt.DeviceMesh((2, n // 2), backend=world.kind) if n >= 4 and n % 2 == 0 else None


def equal(got: Any, want: Any) -> None:
    """Same values (NaN == NaN, -0.0 == 0.0 as NumPy's assert), same dtype and shape."""
    want = np.asarray(want)
    got = np.asarray(got)
    np.testing.assert_array_equal(got, want, strict=True)


class FakeCupyArray:
    """Looks like a CuPy array to ``from_local``'s check (its type lives in the ``cupy`` package)."""

    def __init__(self, a: np.ndarray) -> None:
        self.dtype, self.shape, self.ndim = a.dtype, a.shape, a.ndim


FakeCupyArray.__module__ = "cupy._core.core"


# ---------------------------------------------------------------------------
# 1. placements, specs, meshes, redistribute, ops, dtypes, src_data_rank
# ---------------------------------------------------------------------------
def test_catalogue_placements_specs_meshes_and_ops(world):
    cat = Catalogue(world)
    n = world.size
    mesh = cat.mesh
    mesh2 = two_d_mesh(world)
    a = np.arange(12.0).reshape(3, 4)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    xi = dt.distribute_tensor(np.arange(12).reshape(3, 4), mesh, [Shard(0)])
    ShardingError = dt.ShardingError

    # -- placements of the wrong length, out-of-range dims, 0-d arrays ----------
    cat.raises("placements too long", ShardingError, r"expected 1 placements \(one per dim of mesh \(\d+,\)\), got 2: S\(0\)R",
               lambda: dt.distribute_tensor(a, mesh, [Shard(0), R]))
    cat.raises("placements empty", ShardingError, r"expected 1 placements .*got 0",
               lambda: dt.distribute_tensor(a, mesh, []))
    if mesh2 is not None:
        cat.raises("placements too short (2-D mesh)", ShardingError, r"expected 2 placements \(one per dim of mesh \(2, \d+\)\), got 1: S\(0\)",
                   lambda: dt.distribute_tensor(a, mesh2, [Shard(0)]))
    cat.raises("Shard dim out of range", ShardingError, r"S\(2\) is out of range for a 2-d array \(dims -2\.\.1\)",
               lambda: dt.distribute_tensor(a, mesh, [Shard(2)]))
    cat.raises("negative Shard dim out of range", ShardingError, r"S\(-3\) is out of range for a 2-d array",
               lambda: dt.distribute_tensor(a, mesh, [Shard(-3)]))
    cat.raises("Shard on a 0-d array", ShardingError, r"cannot place S\(0\) on a 0-d array",
               lambda: dt.distribute_tensor(np.array(1.5), mesh, [Shard(0)]))
    cat.raises("Shard on a NumPy scalar", ShardingError, r"cannot place S\(0\) on a 0-d array",
               lambda: dt.distribute_tensor(np.float64(1.5), mesh, [Shard(0)]))

    # -- placement types ---------------------------------------------------------
    cat.raises("unknown reduce op Partial('prod')", ShardingError, r"Partial\(reduce_op\) expects one of sum, avg, max, min, got 'prod'",
               lambda: Partial("prod"))
    cat.raises("reduce op is case-sensitive Partial('SUM')", ShardingError, r"expects one of sum, avg, max, min, got 'SUM'",
               lambda: Partial("SUM"))
    cat.raises("a string instead of a placement", TypeError, r"expected a placement \(Shard\(dim\), Replicate\(\) or Partial\(op\)\), got 'S\(0\)'",
               lambda: dt.distribute_tensor(a, mesh, ["S(0)"]))
    cat.raises("Shard of a string", TypeError, r"Shard\(dim\) expects an int tensor dim, got '0'", lambda: Shard("0"))
    cat.raises("Shard of a float", TypeError, r"Shard\(dim\) expects an int tensor dim, got 0\.0", lambda: Shard(0.0))
    cat.raises("Shard of a bool", TypeError, r"Shard\(dim\) expects an int tensor dim, got True", lambda: Shard(True))
    cat.raises("one placement instead of a list", TypeError, r"placements must be a list or tuple of placements, got Shard\(dim=0\)",
               lambda: dt.distribute_tensor(a, mesh, Shard(0)))

    # -- specs and metadata ------------------------------------------------------
    cat.raises("DTensorSpec given a tuple for the mesh", TypeError, r"DTensorSpec needs a DeviceMesh, got tuple",
               lambda: dt.DTensorSpec((n,), [R]))
    cat.raises("DTensorSpec given a shape for tensor_meta", TypeError, r"tensor_meta must be a TensorMeta, got \(3, 4\)",
               lambda: dt.DTensorSpec(mesh, [R], (3, 4)))
    cat.raises("TensorMeta with a negative size", ShardingError, r"TensorMeta shape must be non-negative, got \(-1, 2\)",
               lambda: dt.TensorMeta((-1, 2), "float64"))
    # Regression: TensorMeta("ab", ...) leaks int()'s ValueError ("invalid literal for int() with base 10: 'a'").
    cat.raises("TensorMeta with a string shape", TypeError, r"TensorMeta shape must be a sequence of ints, got 'ab'",
               lambda: dt.TensorMeta("ab", "float64"),
               bug="expected TypeError 'TensorMeta shape must be a sequence of ints, got 'ab''; "
                   "got ValueError \"invalid literal for int() with base 10: 'a'\"")
    # Regression: TensorMeta((1.5, 2), ...) silently truncates to (1, 2).
    cat.raises("TensorMeta with a fractional size", TypeError, r"TensorMeta shape must be a sequence of ints, got \(1\.5, 2\)",
               lambda: dt.TensorMeta((1.5, 2), "float64"),
               bug="expected TypeError naming (1.5, 2); got no error: the shape silently becomes (1, 2)")
    cat.raises("distribute_tensor given a tuple for the mesh", TypeError, r"distribute_tensor needs a DeviceMesh, got tuple",
               lambda: dt.distribute_tensor(a, (n,), [R]))
    cat.raises("distribute_tensor of a DTensor", TypeError, r"expected a NumPy or CuPy array for the array, got a DTensor",
               lambda: dt.distribute_tensor(x, mesh, [R]))

    # -- object, string and other dtypes MPI cannot move -------------------------
    for label, bad in [
        ("object", np.array([1, "a", None], dtype=object)),
        ("str", np.array(["ab", "c"])),
        ("bytes", np.array([b"ab", b"c"])),
        ("datetime64", np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]")),
        ("void", np.zeros(2, dtype="V4")),
    ]:
        cat.raises(f"distribute_tensor of a {label} array", TypeError,
                   rf"dtensor_np distributes numeric and bool arrays; the array has dtype {re.escape(str(bad.dtype))}",
                   lambda bad=bad: dt.distribute_tensor(bad, mesh, [R]))
    cat.raises("distribute_tensor of a list of strings", TypeError, r"the array has dtype <U",
               lambda: dt.distribute_tensor(["a", "b"], mesh, [R]))
    if n > 1:  # one rank: a Partial over one rank never reduces, so there is nothing to refuse
        cat.raises("Partial('avg') of an integer array", TypeError, r"'avg' needs a floating or complex dtype, got int64",
                   lambda: dt.distribute_tensor(np.arange(6), mesh, [Partial("avg")]).full_tensor())
    # Regression: an ndarray subclass was taken as its data: a masked array's mask was dropped, a matrix kept.
    masked = np.ma.masked_array(a, mask=a > 6)
    cat.raises("distribute_tensor of a masked array", TypeError,
               r"expected a plain numpy\.ndarray or cupy\.ndarray for the array, got numpy\.ma\.MaskedArray; pass x\.filled\(fill_value\)",
               lambda: dt.distribute_tensor(masked, mesh, [Shard(0)]),
               bug="expected TypeError naming numpy.ma.MaskedArray; got a DTensor of the data with the mask dropped")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # NumPy discourages np.matrix itself
        matrix = np.matrix(a)
    cat.raises("distribute_tensor of a numpy.matrix", TypeError, r"got numpy\.matrix; pass np\.asarray\(x\)",
               lambda: dt.distribute_tensor(matrix, mesh, [Shard(1)]),
               bug="expected TypeError naming numpy.matrix; got a DTensor")
    big = (np.arange(7.0) * 1.5).astype(">f8")
    # Regression: np.mean of a big-endian DTensor asked np.sum for dtype='>f8', which NumPy refuses.
    cat.works("np.mean of a big-endian DTensor equals NumPy", lambda: [
        equal(f(dt.distribute_tensor(big, mesh, [p]), axis=axis).full_tensor(), np.asarray(f(big, axis=axis)))
        for f in (np.mean, np.sum, np.max) for p in (Shard(0), R, Partial("max")) for axis in (None, 0)
        if not (p == Partial("max") and f is not np.max)],
        bug="expected NumPy's values; got TypeError 'The `dtype` and `signature` arguments to ufuncs only select "
            "the general DType and not details such as the byte order'")
    if n > 1:
        # Regression (MPI): a dtype code from another process that this one never saw was named "<dtype #1468801180>".
        cat.raises("a collective whose ranks disagree on byte order names both dtypes", CollectiveError,
                   rf"dtype mismatch in group .*: expected float64 \(rank 0\) on every member, got >f8 on rank {n - 1}",
                   lambda: world.backend.all_gather(
                       {r: np.zeros(2, ">f8" if r == n - 1 else "f8") for r in world.ranks}, (tuple(range(n)),)),
                   bug=None if world.kind == "simulated" else "expected the name >f8; got '<dtype #1468801180>' on the ranks that never saw it")

    # -- redistribute ------------------------------------------------------------
    p_sum = dt.distribute_tensor(a, mesh, [Partial("sum")])
    p_max = dt.distribute_tensor(a, mesh, [Partial("max")])
    if n > 1:
        cat.raises("redistribute Partial(sum) -> Partial(max)", ShardingError,
                   r"cannot redistribute P\(sum\) to P\(max\) on mesh dim 0: Partials of different reduce ops do not convert",
                   lambda: p_sum.redistribute([Partial("max")]))
        cat.raises("redistribute Partial(max) -> Partial(min)", ShardingError,
                   r"cannot redistribute P\(max\) to P\(min\) on mesh dim 0",
                   lambda: p_max.redistribute([Partial("min")]))
        cat.works("Shard -> Partial(sum) goes through Replicate and keeps the value",
                  lambda: equal(x.redistribute([Partial("sum")]).full_tensor(), a))
        cat.works("Shard -> Partial(max) goes through Replicate and keeps the value",
                  lambda: equal(x.redistribute([Partial("max")]).full_tensor(), a))
        if mesh2 is not None:
            y2 = dt.distribute_tensor(a, mesh2, [R, Shard(1)])
            cat.works("Shard -> Partial on mesh dim 1 keeps the value",
                      lambda: equal(y2.redistribute([R, Partial("sum")]).full_tensor(), a))
    else:  # one rank holds the whole array: every placement is the same data, so these work
        cat.works("Shard -> Partial on a one-rank mesh keeps the value",
                  lambda: equal(x.redistribute([Partial("sum")]).full_tensor(), a))
        cat.works("Partial(sum) -> Partial(max) on a one-rank mesh keeps the value",
                  lambda: equal(p_sum.redistribute([Partial("max")]).full_tensor(), a))
    cat.raises("redistribute with the wrong number of placements", ShardingError, r"expected 1 placements .*got 2: RR",
               lambda: x.redistribute([R, R]))
    cat.raises("redistribute to a string", TypeError, r"expected a placement .*got 'R'", lambda: x.redistribute(["R"]))
    cat.raises("redistribute to one placement, not a list", TypeError, r"placements must be a list or tuple of placements, got Replicate\(\)",
               lambda: x.redistribute(R))
    cat.raises("redistribute to an out-of-range Shard", ShardingError, r"S\(5\) is out of range for a 2-d array",
               lambda: x.redistribute([Shard(5)]))
    cat.raises("redistribute with a shard order that does not match", ShardingError,
               r"shard order \(\(1, \(0,\)\),\) does not match placements S\(0\)",
               lambda: x.redistribute([Shard(0)], shard_order=((1, (0,)),)))
    other = dt.DeviceMesh((n,), dim_names=("w",), backend=world.kind)
    cat.raises("plan_redistribute between two meshes", ShardingError, r"cannot redistribute between different meshes",
               lambda: dt.plan_redistribute(x.spec, dt.DTensorSpec(other, [R], x.spec.tensor_meta)))
    # Regression: a list inside the placements reached the redistribute cache's dict: "unhashable type: 'list'".
    cat.raises("redistribute to a nested list", TypeError, r"expected a placement .*got \[Replicate\(\)\]",
               lambda: x.redistribute([[R]]), bug="expected the placement TypeError; got TypeError \"unhashable type: 'list'\"")
    shard_order_type = r"shard_order must be a tuple of \(tensor dim, \(mesh dim, \.\.\.\)\) pairs of ints, got "
    # Regression: malformed shard orders were read with int() and unpacking: accepted, or a stray error.
    cat.raises("a shard order entry without a tuple of mesh dims", TypeError, shard_order_type + r"\(\(0, 0\),\)",
               lambda: x.redistribute([Shard(0)], shard_order=((0, 0),)),
               bug="expected TypeError; got ShardingError 'shard order () does not match placements S(0)'")
    cat.raises("a shard order given as a string", TypeError, shard_order_type + "'ab'",
               lambda: x.redistribute([Shard(0)], shard_order="ab"),
               bug="expected TypeError; got ValueError 'not enough values to unpack (expected 2, got 1)'")
    cat.raises("a shard order with a string dim", TypeError, shard_order_type + r"\(\('0', \(0,\)\),\)",
               lambda: x.redistribute([Shard(0)], shard_order=(("0", (0,)),)),
               bug="expected TypeError; got a DTensor: int('0') read it as tensor dim 0")
    cat.works("a shard order of lists works", lambda: equal(x.redistribute([Shard(1)], shard_order=[[1, [0]]]).full_tensor(), a))
    cat.raises("exact_plan that is not a bool", TypeError, r"redistribute: exact_plan must be True or False, got 'yes'",
               lambda: x.redistribute([R], exact_plan="yes"))
    cat.raises("exact_plan that is a list", TypeError, r"redistribute: exact_plan must be True or False, got \[True\]",
               lambda: x.redistribute([R], exact_plan=[True]))
    cat.works("exact_plan=True keeps the value", lambda: equal(x.redistribute([R], exact_plan=np.True_).full_tensor(), a))
    # after exact_plan=True is cached, 1 (equal to True, so the same cache key) is still refused
    cat.raises("exact_plan=1 after exact_plan=True", TypeError, r"redistribute: exact_plan must be True or False, got 1",
               lambda: x.redistribute([R], exact_plan=1))
    cat.raises("plan_redistribute with exact that is not a bool", TypeError, r"plan_redistribute: exact must be True or False, got 1",
               lambda: dt.plan_redistribute(x.spec, x.spec.with_placements((R,)), exact=1))
    # Regression: plan_redistribute("a", "b") raised AttributeError "'str' object has no attribute 'mesh'".
    cat.raises("plan_redistribute of strings", TypeError, r"plan_redistribute needs a DTensorSpec for the source, got str 'a'",
               lambda: dt.plan_redistribute("a", "b"), bug="expected TypeError naming DTensorSpec; got AttributeError")
    cat.raises("plan_redistribute to a placement list", TypeError, r"plan_redistribute needs a DTensorSpec for the target, got list",
               lambda: dt.plan_redistribute(x.spec, [R]), bug="expected TypeError naming DTensorSpec; got AttributeError")
    # Regression: a missing coordinate raised "'NoneType' object is not iterable".
    cat.raises("compute_local_shape_and_global_offset without a coordinate", TypeError,
               r"compute_local_shape_and_global_offset: coordinate must be a mesh coordinate \(one int per mesh dim\), got None",
               lambda: dt.compute_local_shape_and_global_offset(a.shape, mesh, [Shard(0)], None),
               bug="expected TypeError naming the coordinate; got \"'NoneType' object is not iterable\"")
    cat.works("compute_local_shape_and_global_offset takes NumPy integers", lambda: equal(
        np.array(dt.compute_local_shape_and_global_offset(np.array(a.shape), mesh, [Shard(0)], (np.int64(n - 1),))),
        np.array(dt.compute_local_shape_and_global_offset(a.shape, mesh, [Shard(0)], (n - 1,)))))
    cat.works("x is unchanged after the refused redistributes", lambda: equal(x.full_tensor(), a))

    # -- operands that do not fit together ----------------------------------------
    y_other = dt.distribute_tensor(a, other, [Shard(0)])
    cat.raises("np.add of DTensors on two meshes", ShardingError,
               r"numpy\.add: the DTensors live on different meshes, DeviceMesh\(\(\d+,\)[^)]*\) and DeviceMesh\(\(\d+,\), dim_names=\('w',\)",
               lambda: np.add(x, y_other))
    cat.raises("x @ y on two meshes", ShardingError, r"numpy\.matmul: the DTensors live on different meshes",
               lambda: x @ y_other.T)
    if mesh2 is not None:
        cat.raises("x + y on a 1-D and a 2-D mesh of the same ranks", ShardingError,
                   r"numpy\.add: the DTensors live on different meshes",
                   lambda: x + dt.distribute_tensor(a, mesh2, [R, R]))
    # a plain ndarray in a call is a replicated constant, as JAX takes one: NumPy's values, nothing moves
    cat.works("np.add(DTensor, ndarray) is NumPy's", lambda: equal(np.add(x, a).full_tensor(), a + a))
    cat.works("ndarray + DTensor is NumPy's", lambda: equal((a + x).full_tensor(), a + a))
    cat.works("DTensor @ ndarray is NumPy's", lambda: equal((x @ a.T).full_tensor(), a @ a.T))
    cat.works("np.where with an ndarray is NumPy's", lambda: equal(np.where(x > 1, x, a).full_tensor(), a))
    refused = r"np\.asarray of a DTensor of \d+ bytes would gather it on every rank, and implicit gathers are refused"
    if n > 1:
        with dt.implicit_gather("raise"):
            cat.raises("np.asarray(DTensor) with implicit gathers refused", TypeError, refused, lambda: np.asarray(x))
            cat.raises("np.array(DTensor) with implicit gathers refused", TypeError, refused, lambda: np.array(x))
    with dt.implicit_gather("allow"):
        cat.works("np.asarray(DTensor) gathers the whole array", lambda: equal(np.asarray(x), a))
    # Python scalars of a one-element DTensor are its value on every rank (tests/test_array_api_basics.py);
    # of a larger one, NumPy's errors, raised before any communication.
    cat.raises("float() of a DTensor with several elements", TypeError, r"only (length-1|0-dimensional) arrays can be converted",
               lambda: float(x))
    cat.raises("int() of a DTensor with several elements", TypeError, r"only (length-1|0-dimensional) arrays can be converted",
               lambda: int(x))
    # Regression: DTensor had __len__ but no __bool__, so `if x:` was len(x) > 0: True here, silently.
    cat.raises("bool() of a DTensor with several elements", ValueError, r"truth value of an array with more than one element is ambiguous",
               lambda: bool(x),
               bug="expected ValueError like NumPy's ('truth value ... is ambiguous'); got True (from __len__)")
    # -- issue 40: checked as NumPy checks them, after a good call too (the caches keep no wrong key) ----
    for f in (np.sum, np.max, np.var, np.nanmax, np.linalg.norm):
        cat.works(f"{f.__name__}(keepdims=1) as NumPy", lambda f=f: equal(f(x, axis=0, keepdims=1).full_tensor(),
                                                                                f(a, axis=0, keepdims=1)))
        cat.raises(f"{f.__name__}(keepdims=1.0) after a good call", TypeError, r"integer argument expected, got float",
                   lambda f=f: f(x, axis=0, keepdims=1.0))
        cat.raises(f"{f.__name__}(keepdims='yes')", TypeError, r"'str' object cannot be interpreted as an integer",
                   lambda f=f: f(x, axis=0, keepdims="yes"))
    # Found by tests/test_fuzz_bad_input.py: a bad keepdims= AND a bad axis: NumPy's error, checked in NumPy's order
    # (ufunc reductions read keepdims= first; mean, var and std count the axes' items first).
    for f in (np.sum, np.min):
        cat.raises(f"{f.__name__}(axis=(0, 0), keepdims=None)", TypeError, r"'NoneType' object cannot be interpreted",
                   lambda f=f: f(x, axis=(0, 0), keepdims=None))
    for f in (np.mean, np.var, np.std):
        cat.raises(f"{f.__name__}(axis=-3, keepdims='yes')", np.exceptions.AxisError, r"axis -3 is out of bounds",
                   lambda f=f: f(x, axis=-3, keepdims="yes"))
    cat.raises("mean(axis=(0, 0), keepdims='yes')", TypeError, r"'str' object cannot be interpreted as an integer",
               lambda: np.mean(x, axis=(0, 0), keepdims="yes"))
    for f in (np.var, np.std):
        cat.raises(f"{f.__name__}(axis=-3, ddof='a')", np.exceptions.AxisError, r"axis -3 is out of bounds",
                   lambda f=f: f(x, axis=-3, ddof="a"))
        cat.raises(f"{f.__name__}(axis=(0, 0), ddof='a')", TypeError, r"expected ddof as a number, got str",
                   lambda f=f: f(x, axis=(0, 0), ddof="a"))
    # The moments (one local pass and one all_gather, issue 41) take no where= mask; a mean= must broadcast
    for f in (np.var, np.std, np.nanvar, np.nanstd, np.nanmean):
        cat.raises(f"{f.__name__}(where=mask)", ShardingError, rf"numpy.{f.__name__} on DTensors: expected no where=, got ndarray",
                   lambda f=f: f(x, axis=0, where=np.ones((3, 4), bool)))
    for f in (np.var, np.std, np.nanvar, np.nanstd):
        cat.raises(f"{f.__name__}(mean=(3, 1) for (3, 4))", ValueError, r"expected mean= of a shape that broadcasts "
                   r"to the array's \(3, 4\), got \(2, 1\)", lambda f=f: f(x, axis=0, mean=np.zeros((2, 1))))
        cat.works(f"{f.__name__}(mean=m) as NumPy", lambda f=f: equal(
            f(x, axis=0, mean=np.mean(x, axis=0, keepdims=True)).full_tensor(), f(a, axis=0, mean=np.mean(a, axis=0, keepdims=True))))
    for f in (np.sum, np.prod):
        cat.raises(f"{f.__name__}(axis=2, dtype='foo')", TypeError, r"data type 'foo' not understood",
                   lambda f=f: f(x, axis=2, dtype="foo"))
    cat.works("argmax(axis=0)", lambda: equal(np.argmax(x, axis=0).full_tensor(), np.argmax(a, axis=0)))
    cat.raises("argmax(axis=(0, 1)) after a good call", TypeError, r"'tuple' object cannot be interpreted as an integer",
               lambda: np.argmax(x, axis=(0, 1)))
    for bad in ({}, "a", object()):
        cat.raises(f"x + {type(bad).__name__}", TypeError, r"unsupported operand: expected a number", lambda bad=bad: x + bad)
    cat.works("x == 'a' is all False, as NumPy's", lambda: equal((x == "a").full_tensor(), a == "a"))
    cat.works("x != None is all True, as NumPy's", lambda: equal((x != None).full_tensor(), a != None))  # noqa: E711
    cat.works("np.equal(x, {}) is all False, as NumPy's", lambda: equal(np.equal(x, {}).full_tensor(), np.equal(a, {})))
    cat.works("np.not_equal(None, x) is all True", lambda: equal(np.not_equal(None, x).full_tensor(), np.not_equal(None, a)))
    cat.raises("np.equal(x, 'a'): no loop, as NumPy's", TypeError, r"unsupported operand", lambda: np.equal(x, "a"))
    cat.works("reshape(None) keeps the shape, as NumPy 2's", lambda: equal(x.reshape(None).full_tensor(), a.reshape(None)))
    cat.works("reshape((-2, 12)): a negative length is the unknown one, as NumPy 2's",
              lambda: equal(x.reshape((-2, 12)).full_tensor(), a.reshape((-2, 12))))
    cat.raises("reshape((-2, -1))", ValueError, r"can only specify one unknown dimension", lambda: x.reshape((-2, -1)))

    def set_one(y: Any, index: Any, value: Any) -> Any:
        y = y.copy()
        y[index] = value
        return y.full_tensor() if hasattr(y, "full_tensor") else y

    b = a > 4
    xb = dt.distribute_tensor(b, mesh, [Shard(1)])
    for value in ([1.0, 2.0], [], "a"):
        cat.works(f"a bool element set to {value!r}: its truth value, as NumPy's",
                  lambda value=value: equal(set_one(xb, (2, 3), value), set_one(b, (2, 3), value)))
    cat.raises("an int element set to a list", TypeError, r"int\(\) argument must be", lambda: set_one(xi, (0, 0), [1, 2]))
    cat.raises("a float element set to a list", ValueError, r"setting an array element with a sequence",
               lambda: set_one(x, (0, 0), [1.0, 2.0]))
    cat.raises("x[[0, 9]] = np.ones(2): the value's shape first, as NumPy's", ValueError,
               r"shape mismatch: value array of shape \(2,\) could not be broadcast", lambda: set_one(x, [0, 9], np.ones(2)))
    cat.raises("x[[0, 9]] = np.ones(4)", IndexError, r"index 9 is out of bounds", lambda: set_one(x, [0, 9], np.ones(4)))
    cat.raises("einsum with an output letter not in the input", ValueError, r"Output character k did not appear",
               lambda: np.einsum("ij->k", x))
    cat.raises("einsum with too few subscripts", ValueError, r"does not contain the correct number of indices",
               lambda: np.einsum("i->", x))
    cat.works("Shard(np.int64(0))", lambda: dt.distribute_tensor(a, mesh, [Shard(np.int64(0))]).placements == (Shard(0),))
    cat.raises("rank_at outside the mesh", ShardingError, r"expected a coordinate of the mesh of shape",
               lambda: mesh.rank_at((n,)))
    cat.raises("rank_at with too few coordinates", ShardingError, r"expected a coordinate of the mesh of shape",
               lambda: dt.DeviceMesh((1, n), backend=world.kind).rank_at((0,)))
    for name, make in (("astype(str)", lambda: x.astype(str)), ("astype(datetime64)", lambda: x.astype("datetime64[s]")),
                       ("xp.ones(dtype=object)", lambda: dt.array_api.namespace(mesh).ones((2, 2), dtype=object)),
                       ("xp.full(..., 'a')", lambda: dt.array_api.namespace(mesh).full((2, 2), "a"))):
        cat.raises(f"{name}: a dtype that cannot travel, refused where it is made", TypeError,
                   r"expected a numeric or bool dtype, got", make)
    for f in (np.sum, np.mean, np.max, np.var):
        cat.works(f"{f.__name__}(out=int array) casts unsafely, as NumPy",
                  lambda f=f: equal(f(x, axis=0, out=dt.distribute_tensor(np.zeros(4, int), mesh, [R])).full_tensor(),
                                    f(a, axis=0, out=np.zeros(4, int))))
    cat.raises("var(ddof='a')", TypeError, r"expected ddof as a number, got str", lambda: np.var(x, ddof="a"))
    cat.raises("visualize_sharding of an ndarray", TypeError, r"expected a DTensor or a DTensorSpec",
               lambda: dt.visualize_sharding(a))
    cat.raises("value_and_grad argnums (0, 0)", ShardingError, r"expected distinct argnums",
               lambda: dt.value_and_grad(lambda p: np.sum(p * p), argnums=(0, 0))(a))
    cat.raises("value_and_grad argnums '0'", TypeError, r"argnums must be an int or a non-empty tuple of ints",
               lambda: dt.value_and_grad(lambda p: np.sum(p * p), argnums="0")(a))
    cat.raises("value_and_grad of a tuple output", TypeError, r"grad needs a function returning a scalar, got tuple",
               lambda: dt.value_and_grad(lambda p: (np.sum(p), 1))(a))
    cat.raises("value_and_grad has_aux with a scalar output", TypeError, r"has_aux=True: expected the function to return a pair",
               lambda: dt.value_and_grad(lambda p: np.sum(p), has_aux=True)(a))
    cat.raises("optim.sgd('a')", TypeError, r"sgd: expected lr as a real number", lambda: dt.optim.sgd("a"))
    cat.raises("x.item() inside dt.trace", TypeError, r"x\.item\(\) needs the value of a traced array",
               lambda: dt.trace(lambda v: v.item(), dt.ShapeDtype((), "float64")))
    plan = dt.plan_redistribute(x.spec, x.spec.with_placements((R,)))
    cat.raises("explain with a placement string for the spec", TypeError, r"expected the source DTensorSpec second",
               lambda: dt.explain(plan, "R"))
    cat.raises("explain with its arguments swapped", TypeError, r"expected the source DTensorSpec second",
               lambda: dt.explain(x.spec, plan))
    cat.raises("an op with no rule (sliding_window_view)", ShardingError,
               r"no sharding rule for numpy\.lib\.stride_tricks\.sliding_window_view: call it on x\.full_tensor\(\)",
               lambda: np.lib.stride_tricks.sliding_window_view(x, 1, axis=0))
    # -- the rules of issue 20 item 3: what they refuse ---------------------------------
    cat.raises("np.take without an axis on a 2-d DTensor", ShardingError,
               r"numpy\.take on DTensors: expected an axis for an array of 2 dims", lambda: np.take(x, [0]))
    cat.raises("np.unique with an axis", ShardingError, r"numpy\.unique on DTensors: expected axis=None, got 0",
               lambda: np.unique(x, axis=0))
    cat.raises("np.cumulative_sum with include_initial", ShardingError,
               r"expected include_initial=False, got True", lambda: np.cumulative_sum(x, axis=0, include_initial=True))
    cat.raises("np.take_along_axis with broadcasting indices", ShardingError,
               r"numpy\.take_along_axis on DTensors: expected indices of shape \(\d+, 4\) but for axis 1",
               lambda: np.take_along_axis(x, dt.distribute_tensor(np.zeros((1, 2), np.int64), mesh, [R]), axis=1))
    cat.raises("np.tril of a 1-d DTensor", ShardingError, r"numpy\.tril on DTensors: expected an array of at least 2 dims, got 1",
               lambda: np.tril(dt.distribute_tensor(np.ones(3), mesh, [R])))
    cat.raises("np.unique under dt.trace", TypeError, r"numpy\.unique has a data-dependent output shape",
               lambda: dt.trace(np.unique, np.arange(3.0)))
    cat.raises("a ufunc method with no rule (np.add.accumulate)", ShardingError, r"no sharding rule for numpy\.add\.accumulate",
               lambda: np.add.accumulate(x))
    cat.raises("a reduction axis out of range", ShardingError, r"axis 5 is out of bounds for array of dimension 2",
               lambda: np.sum(x, axis=5))
    cat.raises("a repeated reduction axis", ShardingError, r"duplicate value in axis", lambda: np.sum(x, axis=(0, 0)))

    # -- axes and shapes: checked like NumPy, with its error types, before anything moves --------
    x0 = dt.distribute_tensor(np.array(2.5), mesh, [R])
    AxisError = np.exceptions.AxisError  # dtensor_np raises its AxisError: a ShardingError and NumPy's AxisError
    cat.raises("an axis out of range is NumPy's AxisError too", AxisError, r"^axis 5 is out of bounds for array of dimension 2$",
               lambda: np.sum(x, axis=5))
    # Regression: swapaxes took every axis modulo ndim: axis 5 of a 2-d array became 1.
    cat.raises("swapaxes with an axis out of range", AxisError, r"axis2: axis 5 is out of bounds for array of dimension 2",
               lambda: x.swapaxes(0, 5), bug="expected AxisError; got a (4, 3) DTensor (axis 5 wrapped to 1)")
    # Regression: 0-d swapaxes raised IndexError "list index out of range" from the rule.
    cat.raises("swapaxes of a 0-d DTensor", AxisError, r"axis1: axis 0 is out of bounds for array of dimension 0",
               lambda: x0.swapaxes(0, 1), bug="expected AxisError; got IndexError 'list index out of range'")
    cat.raises("transpose with an axis out of range", AxisError, r"axes: axis 5 is out of bounds for array of dimension 2",
               lambda: np.transpose(x, (0, 5)))
    cat.raises("transpose with a repeated axis", ShardingError, r"duplicate value in axes \(0, 0\)",
               lambda: np.transpose(x, (0, 0)))
    cat.raises("transpose with too few axes", ShardingError, r"axes \(0,\) don't match array",
               lambda: np.transpose(x, (0,)))
    cat.raises("moveaxis to an axis out of range", AxisError, r"destination: axis 5 is out of bounds for array of dimension 2",
               lambda: np.moveaxis(x, 0, 5))
    cat.raises("expand_dims at an axis out of range", AxisError, r"axis 5 is out of bounds for array of dimension 3",
               lambda: np.expand_dims(x, 5))
    cat.raises("stack along an axis out of range", AxisError, r"axis 3 is out of bounds for array of dimension 3",
               lambda: np.stack([x, x], axis=3))
    # Regression: a string axis was read with int(): axis "0" reduced dim 0.
    cat.raises("np.sum with a string axis", TypeError,
               r"axis must be an int or a tuple of ints, got '0' \('str' object cannot be interpreted as an integer\)",
               lambda: np.sum(x, axis="0"), bug="expected TypeError as NumPy's; got a P(sum) DTensor of shape (4,)")
    # Regression: a list axis was frozen into a tuple: NumPy's reductions refuse it.
    cat.raises("np.sum with a list axis", TypeError, r"got \[0\] \('list' object cannot be interpreted as an integer\)",
               lambda: np.sum(x, axis=[0]), bug="expected TypeError as NumPy's; got a P(sum) DTensor of shape (4,)")
    # Regression: a fractional axis raised "'float' object is not iterable".
    cat.raises("np.sum with a fractional axis", TypeError, r"got 1\.5 \('float' object cannot be interpreted as an integer\)",
               lambda: np.sum(x, axis=1.5), bug="expected TypeError saying what an axis is; got \"'float' object is not iterable\"")
    cat.raises("np.sum with a bool axis", TypeError, r"got True \(a bool is not an axis\)", lambda: np.sum(x, axis=True))
    cat.raises("np.concatenate with a fractional axis", TypeError, r"axis must be an int, got 1\.5",
               lambda: np.concatenate([x, x], axis=1.5))
    # Regression: reshape read its sizes with int(): 2.0 became 2.
    cat.raises("reshape with a float size", TypeError, r"numpy\.reshape: the new shape must be an int or a sequence of ints, got \(2\.0, -1\)",
               lambda: x.reshape(2.0, -1), bug="expected TypeError as NumPy's; got a (2, 6) DTensor")
    cat.raises("np.reshape to a float", TypeError, r"numpy\.reshape: the new shape must be an int or a sequence of ints, got 12\.0",
               lambda: np.reshape(x, 12.0))
    # NumPy's reductions (not np.mean) take the int axis 0 or -1 of a 0-d array and reduce nothing.
    # Regression: np.sum(x0d, axis=0) raised IndexError "tuple index out of range" from the reduction rule.
    cat.works("np.sum/max/prod/any and ufunc.reduce of a 0-d DTensor over axis 0 or -1 equal NumPy", lambda: [
        equal(f(x0, axis=axis).full_tensor(), np.asarray(f(np.array(2.5), axis=axis)))
        for f in (np.sum, np.max, np.prod, np.any, np.add.reduce) for axis in (0, -1)],
        bug="expected NumPy's value 2.5; got IndexError 'tuple index out of range'")
    cat.raises("np.sum of a 0-d DTensor over the tuple axis (0,)", AxisError, r"axis 0 is out of bounds for array of dimension 0",
               lambda: np.sum(x0, axis=(0,)))
    cat.raises("np.sum of a 0-d DTensor over axis 1", AxisError, r"axis 1 is out of bounds for array of dimension 0",
               lambda: np.sum(x0, axis=1))
    cat.raises("np.mean of a 0-d DTensor over axis 0", AxisError, r"axis 0 is out of bounds for array of dimension 0",
               lambda: np.mean(x0, axis=0))

    # -- shapes that do not broadcast: the rule refuses, whatever the placements (never a collective error) --
    wide = np.arange(5.0)
    for pa in (R, Shard(0), Shard(1), Partial("sum")):
        for pb in (R, Shard(0), Partial("sum")):
            cat.raises(f"(3, 4) {pa} + (5,) {pb}", ShardingError, r"has size 4 in one input and 5 in another",
                       lambda pa=pa, pb=pb: dt.distribute_tensor(a, mesh, [pa]) + dt.distribute_tensor(wide, mesh, [pb]))
    if mesh2 is not None:
        cat.raises("(3, 4) S(0)S(1) + (5,) RS(0) on a 2-D mesh", ShardingError, r"has size 4 in one input and 5 in another",
                   lambda: dt.distribute_tensor(a, mesh2, [Shard(0), Shard(1)]) + dt.distribute_tensor(wide, mesh2, [R, Shard(0)]))

    # -- reductions with dtype=: each element is cast, then reduced, as NumPy does ---------------------
    # Regression: an integer mean divided each rank's sum by the count and truncated per rank: 0 for
    # np.mean(arange(4), dtype=int64) on 4 ranks (NumPy: 1), zeros with axis=0 and dtype=int32.
    cat.works("np.mean(dtype=int64) of a sharded int64 array equals NumPy", lambda: [
        equal(np.mean(dt.distribute_tensor(full, mesh, [Shard(0)]), axis=axis, dtype=dtype).full_tensor(),
              np.asarray(np.mean(full, axis=axis, dtype=dtype)))
        for full, axis, dtype in ((np.arange(4), None, np.int64), (np.arange(8).reshape(4, 2), 0, np.int32),
                                  (np.arange(-7, 3), None, np.int8), (np.arange(5), None, np.bool_))],
        bug="expected NumPy's 1 (and [3, 4]); got 0 (and zeros) on 4 ranks: each rank truncated its share")
    # Regression: a float Partial(sum) summed with dtype=int8/int64 cast each rank's partial value, not the sum.
    def sum_of_pending_floats(dtype):
        full = np.array([2.5, 3.5, 7.25, 8.75, 9.0])

        def part(r: int) -> np.ndarray:
            return full - 0.5 * (n - 1) if r == 0 else np.full(5, 0.5)

        pending = dt.DTensor.from_local(per_rank(world, mesh, part), mesh, [Partial("sum")])
        for axis in (None, 0):
            equal(np.sum(pending, axis=axis, dtype=dtype).full_tensor(), np.asarray(np.sum(full, axis=axis, dtype=dtype)))
            equal(np.add.reduce(pending, axis=axis, dtype=dtype).full_tensor(), np.asarray(np.add.reduce(full, axis=axis, dtype=dtype)))

    for dtype in (np.int8, np.int64):
        cat.works(f"np.sum(dtype={dtype.__name__}) of a float Partial(sum) equals NumPy", lambda dtype=dtype: sum_of_pending_floats(dtype),
                  bug="expected NumPy's 29; got the sum of each rank's truncated partial value")
    cat.raises("shapes that do not broadcast", ShardingError, r"has size 4 in one input and 5 in another",
               lambda: np.add(x, dt.distribute_tensor(np.ones(5), mesh, [R])))
    cat.raises("matmul with mismatched inner dims", ShardingError, r"has size 4 in one input and 3 in another",
               lambda: x @ dt.distribute_tensor(np.ones((3, 2)), mesh, [R]))
    cat.raises("reshape to a different size", ValueError, r"cannot reshape array of size 12 into shape \(5, ?2\)",
               lambda: x.reshape(5, 2))
    cat.raises("np.sum(out=an ndarray)", TypeError, r"sum: out= must be DTensors \(the result is distributed\), got ndarray",
               lambda: np.sum(x, axis=0, out=np.zeros(4)))
    cat.raises("a ufunc with out= of another shape", ValueError, r"non-broadcastable output operand with shape \(4,\)",
               lambda: np.add(x, x, out=dt.distribute_tensor(np.zeros(4), mesh, [R])))
    cat.raises("x += a float on an int DTensor", TypeError, r"Cannot cast ufunc 'add' output from dtype\('float64'\) to dtype\('int64'\)",
               lambda: np.add(xi, 1.5, out=xi))

    # -- meshes: sub-meshes and unflatten ------------------------------------------
    named = dt.DeviceMesh((2, 2), dim_names=("dp", "tp"))
    cat.raises("sub-mesh of a mesh without names", ShardingError, r"this mesh has no dim names; build it with dim_names",
               lambda: dt.DeviceMesh((2, 2))["tp"])
    cat.raises("sub-mesh of an unknown name", ShardingError, r"mesh has no dim named 'xx'; its dims are \('dp', 'tp'\)",
               lambda: named["xx"])
    cat.raises("sub-mesh dims out of order", ShardingError, r"sub-mesh dims must be distinct and in mesh order \('dp', 'tp'\), got \('tp', 'dp'\)",
               lambda: named["tp", "dp"])
    cat.raises("sub-mesh dims repeated", ShardingError, r"must be distinct and in mesh order .*got \('tp', 'tp'\)",
               lambda: named["tp", "tp"])
    # Regression: mesh[0] leaks "'int' object is not iterable".
    cat.raises("sub-mesh by index", TypeError, r"dim name.*got 0",
               lambda: named[0],
               bug="expected TypeError saying sub-meshes are taken by dim name, got 0; got TypeError \"'int' object is not iterable\"")
    flat = dt.DeviceMesh((4,), dim_names=("world",))
    cat.raises("unflatten sizes that do not multiply to the dim", ShardingError, r"unflatten sizes \(3, 2\) must multiply to mesh dim size 4",
               lambda: dt.DeviceMesh((4,)).unflatten(0, (3, 2)))
    cat.raises("unflatten into no sizes", ShardingError, r"unflatten sizes \(\) must multiply to mesh dim size 4",
               lambda: dt.DeviceMesh((4,)).unflatten(0, ()))
    cat.raises("unflatten of a named mesh without names", ShardingError, r"name the 2 new dims: this mesh has dim names \('world',\)",
               lambda: flat.unflatten(0, (2, 2)))
    cat.raises("unflatten with too few names", ShardingError, r"expected 2 dim names for mesh shape \(2, 2\), got 1",
               lambda: flat.unflatten(0, (2, 2), ("dp",)))
    cat.raises("unflatten with repeated names", ShardingError, r"mesh dim names must be unique strings, got \('dp', 'dp'\)",
               lambda: flat.unflatten(0, (2, 2), ("dp", "dp")))
    cat.raises("unflatten a name already taken", ShardingError, r"mesh dim names must be unique strings, got \('a', 'a', 'c'\)",
               lambda: dt.DeviceMesh((2, 4), ("a", "b")).unflatten("b", (2, 2), ("a", "c")))
    cat.raises("unflatten a dim the mesh lacks", ShardingError, r"mesh dim must be in \[0, 1\) or a dim name, got 1",
               lambda: flat.unflatten(1, (2, 2), ("dp", "tp")))
    # Regression: unflatten(0, "22") recurses until RecursionError.
    cat.raises("unflatten with a string of sizes", (TypeError, ShardingError), r"sizes.*'22'",
               lambda: dt.DeviceMesh((4,)).unflatten(0, "22"),
               bug="expected TypeError 'unflatten sizes must be a sequence of positive ints, got '22''; got RecursionError")
    # Regression: unflatten(0, 4) leaks "'int' object is not iterable".
    cat.raises("unflatten with one int for the sizes", (TypeError, ShardingError), r"sizes.*got 4",
               lambda: dt.DeviceMesh((4,)).unflatten(0, 4),
               bug="expected TypeError naming the sizes, got 4; got TypeError \"'int' object is not iterable\"")
    # Regression: unflatten(0, (2.0, 2)) leaks "'float' object is not iterable".
    cat.raises("unflatten with a float size", (TypeError, ShardingError), r"sizes.*\(2\.0, 2\)",
               lambda: dt.DeviceMesh((4,)).unflatten(0, (2.0, 2)),
               bug="expected an error naming the sizes (2.0, 2); got TypeError \"'float' object is not iterable\"")
    # Regression: a single string for two names is split into characters: ("a", "b").
    cat.raises("unflatten with one string for two names", ShardingError, r"expected 2 dim names .*got 1",
               lambda: flat.unflatten(0, (2, 2), "ab"),
               bug="expected ShardingError 'expected 2 dim names ..., got 1: ('ab',)' (DeviceMesh treats a str as one name); "
                   "got DeviceMesh((2, 2), dim_names=('a', 'b'))")
    cat.raises("a mesh with a zero-size dim", ShardingError, r"mesh shape must be a non-empty tuple of positive ints, got \(2, 0\)",
               lambda: dt.DeviceMesh((2, 0)))
    cat.raises("a mesh of no dims", ShardingError, r"non-empty tuple of positive ints, got \(\)", lambda: dt.DeviceMesh(()))
    cat.raises("a mesh with too few names", ShardingError, r"expected 2 dim names for mesh shape \(2, 2\), got 1",
               lambda: dt.DeviceMesh((2, 2), ("a",)))
    cat.raises("a mesh on an unknown backend", ShardingError, r"mesh backend must be one of \('simulated', 'mpi'\), got 'nccl'",
               lambda: dt.DeviceMesh((n,), backend="nccl"))
    cat.raises("init_device_mesh on an unknown backend", ShardingError, r"backend must be None, 'simulated' or 'mpi', got 'nccl'",
               lambda: dt.init_device_mesh((n,), backend="nccl"))
    cat.raises("a rank outside the mesh", ShardingError, rf"rank must be in \[0, {n}\), got {n}",
               lambda: mesh.coordinate_of(n))
    # Regression: init_device_mesh("2") recursed until RecursionError; None, (2.5,) and (True, 4) leaked
    # "'...' object is not iterable"; NumPy integers were refused.
    shape_type = r"mesh shape must be a non-empty tuple of positive ints, got "
    for bad_shape, now in (("2", "RecursionError"), (None, "TypeError \"'NoneType' object is not iterable\""),
                           ((2.5,), "TypeError \"'float' object is not iterable\""),
                           ((True, 4), "TypeError \"'bool' object is not iterable\"")):
        cat.raises(f"init_device_mesh({bad_shape!r})", ShardingError, shape_type + re.escape(repr(bad_shape)),
                   lambda bad_shape=bad_shape: dt.init_device_mesh(bad_shape),
                   bug=f"expected ShardingError naming {bad_shape!r}; got {now}")
    cat.raises("DeviceMesh((True, n))", ShardingError, shape_type + rf"\(True, {n}\)", lambda: dt.DeviceMesh((True, n)))

    def numpy_integers_are_ints():
        for shape in ((np.int64(n),), np.array([n]), np.int32(n)):
            made = dt.init_device_mesh(shape)
            assert made == dt.init_device_mesh((n,)) and type(made.shape[0]) is int, (shape, made)
        square = dt.DeviceMesh((np.int64(2), np.int64(2)), world_size=np.int64(4), layout=dt.Layout((np.int64(2), 2), (2, np.int64(1))))
        assert square == dt.DeviceMesh((2, 2)) and square.coordinate_of(np.int64(3)) == (1, 1)
        assert square.rank_groups(np.int64(1)) == [[0, 1], [2, 3]]
        assert dt.DeviceMesh((4,)).unflatten(np.int64(0), np.array([2, 2])) == dt.DeviceMesh((2, 2))

    cat.works("NumPy integers are ints for meshes (init_device_mesh, DeviceMesh, its methods)", numpy_integers_are_ints,
              bug="expected NumPy integers taken as ints; got TypeError \"'numpy.int64' object is not iterable\"")
    # Regression: init_device_mesh split a string of names into characters: ("a", "b").
    cat.raises("init_device_mesh with one string for two names", ShardingError,
               r"expected 2 dim names for mesh shape \(2, 2\), got 1: \('ab',\)",
               lambda: dt.init_device_mesh((2, 2), dim_names="ab", backend="simulated"),
               bug="expected ShardingError (a string is one name, as DeviceMesh takes it); got dim names ('a', 'b')")
    cat.raises("an empty dim name", ShardingError, r"mesh dim names must be non-empty strings, got \('',\)",
               lambda: dt.init_device_mesh((n,), dim_names=("",)), bug="expected ShardingError; got a mesh with a dim named ''")
    cat.raises("dim names that are not a sequence", TypeError, r"mesh dim names must be a tuple of strings \(one per mesh dim\), got 5",
               lambda: dt.DeviceMesh((n,), dim_names=5))

    # -- layouts -----------------------------------------------------------------------------------
    def layout_algebra():
        for shape, stride in (((3, 2), (6, 8)), ((2, 2), (4, 6)), ((3, 2), (2, 3))):
            assert dt.Layout(shape, stride).check_non_overlap() is True, (shape, stride)
        left, right = dt.Layout((4, 3), (4, 6)), dt.Layout((1, 3), (4, 3))
        composed = left.composition(right)
        assert [composed(i) for i in range(3)] == [left(right(i)) for i in range(3)] == [0, 4, 8]

    # Regression: check_non_overlap answered False for these (sorted-stride test only); the composition raised.
    cat.works("layouts that do not overlap, and a composition with a size-1 mode", layout_algebra,
              bug="expected True and (1, 3):(0, 4); got False and ShardingError 'cannot compose'")
    cat.raises("a composition whose modes carry into each other", ShardingError,
               r"cannot compose \(2, 2\):\(1, 2\) with \(2, 2\):\(1, 1\): the modes of \(2, 2\):\(1, 1\) overlap",
               lambda: dt.Layout((2, 2), (1, 2)).composition(dt.Layout((2, 2), (1, 1))),
               bug="expected ShardingError; got (2, 2):(2, 2), which is not i -> self(other(i))")

    # -- an MPI world whose size differs from the mesh -----------------------------
    if world.kind == "mpi":
        cat.raises("init_device_mesh((n+1,)) under mpiexec -n n", ShardingError,
                   rf"launched by mpiexec with {n} ranks, but the mesh \({n + 1},\) has {n + 1}: run `mpiexec -n {n + 1} \.\.\.`",
                   lambda: dt.init_device_mesh((n + 1,)))
        cat.raises("init_device_mesh((3,)) under mpiexec -n n", ShardingError,
                   rf"launched by mpiexec with {n} ranks, but the mesh \(3,\) has 3",
                   lambda: dt.init_device_mesh((3,)))
        cat.raises("init_device_mesh(backend='mpi') of another size", ShardingError,
                   rf"backend='mpi' needs an MPI world of {2 * n} ranks for mesh \(2, {n}\), got {n}",
                   lambda: dt.init_device_mesh((2, n), backend="mpi"))
        cat.raises("a DeviceMesh(backend='mpi') larger than the world", ShardingError,
                   rf"mesh \({2 * n},\) spans {2 * n} ranks but the MPI world has {n}",
                   lambda: dt.distribute_tensor(a, dt.DeviceMesh((2 * n,), backend="mpi"), [R]))
        cat.raises("a DeviceMesh(backend='mpi') smaller than the world", ShardingError,
                   rf"mesh \(1,\) spans 1 ranks but the MPI world has {n}",
                   lambda: dt.distribute_tensor(a, dt.DeviceMesh((1,), backend="mpi"), [R]))
    else:
        def simulated_of_any_size():
            assert dt.init_device_mesh((n + 1,)).backend == "simulated"

        cat.works("init_device_mesh outside mpiexec is simulated, of any size", simulated_of_any_size)

    # -- src_data_rank -------------------------------------------------------------
    # Regression (simulated only): src_data_rank is checked under MPI only; simulated accepts any value.
    sim_bug = None if world.kind == "mpi" else "expected the same ShardingError as under MPI; got no error in simulated mode"
    cat.raises("src_data_rank past the last rank", ShardingError, rf"src_data_rank must be a rank in \[0, {n}\), got {n}",
               lambda: dt.distribute_tensor(a, mesh, [Shard(0)], src_data_rank=n), bug=sim_bug)
    cat.raises("negative src_data_rank", ShardingError, rf"src_data_rank must be a rank in \[0, {n}\), got -1",
               lambda: dt.distribute_tensor(a, mesh, [Shard(0)], src_data_rank=-1), bug=sim_bug)
    # Regression: a non-int src_data_rank leaks "'<=' not supported between instances of 'int' and 'str'" (MPI)
    # or is ignored (simulated).
    cat.raises("src_data_rank of the wrong type", TypeError, r"src_data_rank must be an int rank .*or None, got '0'",
               lambda: dt.distribute_tensor(a, mesh, [Shard(0)], src_data_rank="0"),
               bug="expected TypeError 'src_data_rank must be an int rank in [0, n) or None, got '0''; got "
                   + ("TypeError \"'<=' not supported between instances of 'int' and 'str'\"" if world.kind == "mpi"
                      else "no error in simulated mode"))
    cat.works("src_data_rank=None and the last rank work", lambda: (
        equal(dt.distribute_tensor(a, mesh, [Shard(1)], src_data_rank=None).full_tensor(), a),
        equal(dt.distribute_tensor(a, mesh, [Shard(1)], src_data_rank=n - 1).full_tensor(), a),
    ))
    cat.finish()


# ---------------------------------------------------------------------------
# 2. from_local: wrong arguments, and shards that disagree across ranks
# ---------------------------------------------------------------------------
def test_catalogue_from_local(world):
    cat = Catalogue(world)
    n = world.size
    mesh = cat.mesh
    mpi = world.kind == "mpi"
    bad = n - 1  # the rank with the wrong shard (not rank 0, whose row the check compares against)
    ShardingError = dt.ShardingError

    def good(r: int) -> np.ndarray:
        return np.arange(3.0) + 3 * r

    def with_bad(make_bad: Callable[[int], Any], make_good: Callable[[int], Any] = good) -> Any:
        return per_rank(world, mesh, lambda r: make_bad(r) if r == bad else make_good(r))

    full = np.arange(3.0 * n)
    cat.works("from_local of good shards", lambda: equal(dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [Shard(0)]).full_tensor(), full))

    # -- arguments that are wrong on every rank -------------------------------------
    cat.raises("from_local given a tuple for the mesh", TypeError, r"from_local needs a DeviceMesh, got tuple",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), (n,), [Shard(0)]))
    cat.raises("from_local with the wrong number of placements", ShardingError, r"expected 1 placements .*got 2: S\(0\)R",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [Shard(0), R]))
    cat.raises("from_local with a string placement", TypeError, r"expected a placement .*got 'S\(0\)'",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, ["S(0)"]))
    cat.raises("from_local with one placement, not a list", TypeError, r"placements must be a list or tuple of placements, got Shard\(dim=0\)",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, Shard(0)))
    cat.raises("from_local with a shape of the wrong ndim", ShardingError, r"from_local: shape \(3, 1\) has 2 dims, the shards have 1",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [Shard(0)], shape=(3, 1)))
    cat.raises("from_local with a shape the shards do not tile", ShardingError,
               rf"from_local: shards do not tile global shape \({3 * n + 1},\) with placements \['S\(0\)'\]",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [Shard(0)], shape=(3 * n + 1,)))
    cat.raises("from_local with a negative shape", ShardingError, r"shape must be non-negative, got \(-3,\)",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [R], shape=(-3,)))
    # Regression: a fractional global shape is truncated silently (TensorMeta runs int() on it).
    cat.raises("from_local with a fractional shape", TypeError, r"shape must be a sequence of ints, got \(3\.5,\)",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [R], shape=(3.5,)),
               bug="expected TypeError naming (3.5,); got a DTensor of shape (3,)")
    # Regression: shape=6 raised "'int' object is not iterable", after the shared check's collective.
    cat.raises("from_local with one int for the shape", TypeError, r"from_local: shape must be a sequence of ints, got 6",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [R], shape=6),
               bug="expected TypeError naming the shape, before any collective; got \"'int' object is not iterable\"")
    cat.works("from_local takes NumPy integers in the shape",
              lambda: equal(dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [Shard(0)], shape=np.array([3 * n])).full_tensor(), full))
    # Regression: a masked shard was taken as its data (the mask dropped).
    cat.raises("from_local: every shard is a masked array", TypeError,
               r"is an ndarray subclass .*got numpy\.ma\.MaskedArray; pass x\.filled\(fill_value\)",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, lambda r: np.ma.masked_array(good(r), mask=good(r) > 4)), mesh, [Shard(0)]),
               bug="expected TypeError naming numpy.ma.MaskedArray; got a DTensor without the mask")
    if mpi:
        cat.raises("from_local given {rank: array} under MPI", TypeError,
                   r"under MPI, from_local takes this rank's own array, not a mapping of ranks",
                   lambda: dt.DTensor.from_local({world.ranks[0]: good(world.ranks[0])}, mesh, [Shard(0)]))
    else:
        ranks = list(range(n))
        cat.raises("from_local given one array in simulated mode", TypeError,
                   r"in simulated mode, from_local takes \{rank: array\} for every rank .*got ndarray",
                   lambda: dt.DTensor.from_local(good(0), mesh, [Shard(0)]))
        cat.raises("from_local missing a rank's shard", ShardingError, rf"expected shards for ranks {re.escape(str(ranks))}, got ranks {re.escape(str(ranks[:-1]))}",
                   lambda: dt.DTensor.from_local({r: good(r) for r in range(n - 1)}, mesh, [Shard(0)]))
        cat.raises("from_local with a shard for a rank outside the mesh", ShardingError,
                   rf"expected shards for ranks {re.escape(str(ranks))}, got ranks {re.escape(str(ranks + [n]))}",
                   lambda: dt.DTensor.from_local({r: good(r) for r in range(n + 1)}, mesh, [Shard(0)]))
        cat.raises("from_local with string rank keys", ShardingError, r"expected shards for ranks .*got ranks \['0'",
                   lambda: dt.DTensor.from_local({str(r): good(r) for r in range(n)}, mesh, [Shard(0)]))
        small = dt.distribute_tensor(np.arange(4.0), dt.DeviceMesh((n + 1,)), [Shard(0)]).to_local()
        cat.raises("from_local of another mesh's LocalTensor", ShardingError,
                   rf"expected shards for ranks {re.escape(str(ranks))}, got ranks {re.escape(str(list(range(n + 1))))}",
                   lambda: dt.DTensor.from_local(small, mesh, [Shard(0)]))

    # -- one rank's shard disagrees with the others' (checked together: every rank raises) --
    if n > 1:
        cat.raises("from_local: one rank's shard has another shape (Replicate)", ShardingError,
                   rf"from_local: shards do not tile global shape \(3,\) with placements \['R'\] \(torch\.chunk sizes\): rank {bad} holds \(5,\), expected \(3,\)",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: np.arange(5.0)), mesh, [R]))
        cat.raises("from_local: one rank's shard has another length (Shard)", ShardingError,
                   rf"from_local: shards do not tile global shape \({3 * (n - 1) + 5},\) .*rank {bad} holds \(5,\)",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: np.arange(5.0)), mesh, [Shard(0)]))
        cat.raises("from_local: one rank's shard has another dtype", ShardingError,
                   rf"from_local: the ranks' shards disagree on array library, dtype or ndim: rank 0: numpy float64 \(3,\); .*rank {bad}: numpy float32 \(3,\)",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: good(r).astype(np.float32)), mesh, [Shard(0)]))
        cat.raises("from_local: one rank's shard is from another array library", ShardingError,
                   rf"disagree on array library, dtype or ndim: rank 0: numpy float64 \(3,\); .*rank {bad}: cupy float64 \(3,\)",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: FakeCupyArray(good(r))), mesh, [Shard(0)]))
        cat.raises("from_local: one rank's shard has another ndim", ShardingError,
                   rf"disagree on array library, dtype or ndim: .*rank {bad}: numpy float64 \(3, 1\)",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: good(r).reshape(3, 1)), mesh, [R]))
        # Regression: the rank with the bad shard raises TypeError("... got str") that does not name it; the
        # other ranks raise ShardingError("from_local: rank N's shard is not a NumPy or CuPy array").
        cat.raises("from_local: one rank's shard is not an array", TypeError,
                   rf"rank {bad}'s shard is not a NumPy or CuPy array",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: "abc"), mesh, [Shard(0)]),
                   same_message=False,
                   bug=f"expected TypeError naming rank {bad} on every rank; got TypeError 'from_local expects a NumPy or CuPy "
                       f"array for each shard, got str' (no rank named) on rank {bad}"
                       + (" and ShardingError on the other ranks" if mpi else " (simulated)"))
        # Regression: same split for an object-dtype shard (TypeError without the rank there, ShardingError elsewhere).
        cat.raises("from_local: one rank's shard has object dtype", TypeError,
                   rf"rank {bad}'s shard has a dtype that cannot be distributed",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: good(r).astype(object)), mesh, [Shard(0)]),
                   same_message=False,
                   bug=f"expected TypeError naming rank {bad} on every rank; got TypeError 'dtensor_np distributes numeric "
                       f"and bool arrays; the local shard has dtype object ...' (no rank named) on rank {bad}"
                       + (" and ShardingError on the other ranks" if mpi else " (simulated)"))
        # Regression: the rank with the 0-d shard says "a 0-d local shard cannot take placements ['S(0)']" without its rank.
        cat.raises("from_local: one rank's shard is 0-d under Shard(0)", ShardingError,
                   rf"rank {bad}'s shard .*S\(0\)|S\(0\).*rank {bad}'s shard",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: np.array(1.0)), mesh, [Shard(0)]),
                   same_message=False,
                   bug=f"expected every rank's message to name rank {bad} and S(0); got 'a 0-d local shard cannot take "
                       f"placements ['S(0)']' (no rank named) on rank {bad}"
                       + (f", \"from_local: rank {bad}'s shard has a different number of dims ...\" (no placement) elsewhere" if mpi else ""))
        cat.raises("from_local: one rank's shard is a masked array", TypeError,
                   rf"rank {bad}'s shard is an ndarray subclass \(a masked array or matrix\), not a plain numpy\.ndarray",
                   lambda: dt.DTensor.from_local(with_bad(lambda r: np.ma.masked_array(good(r))), mesh, [Shard(0)]),
                   same_message=False,
                   bug=f"expected TypeError naming rank {bad} on every rank; got a DTensor (rank {bad}'s mask dropped)")
    cat.raises("from_local: every shard has object dtype", TypeError, r"has dtype object",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, lambda r: good(r).astype(object)), mesh, [Shard(0)]))
    cat.raises("from_local: every shard is 0-d under Shard(0)", ShardingError, r"0-d local shard cannot take placements \['S\(0\)'\]",
               lambda: dt.DTensor.from_local(per_rank(world, mesh, lambda r: np.array(1.0)), mesh, [Shard(0)]))
    cat.works("from_local works again after the refusals",
              lambda: equal(dt.DTensor.from_local(per_rank(world, mesh, good), mesh, [Shard(0)]).full_tensor(), full))
    cat.finish()


# ---------------------------------------------------------------------------
# 3. NaN and inf pass through like NumPy; sizes 0 and 1 everywhere
# ---------------------------------------------------------------------------
NAN_1D = np.array([1.0, NAN, 3.0, -INF, 5.0, INF, 2.0])
NAN_2D = np.array(
    [[1.0, 2.0, NAN], [INF, -INF, 0.0], [4.0, 5.0, 6.0], [NAN, NAN, NAN], [-1.0, INF, 7.0]]
)


class Steps:
    """The checks of one value entry: every step runs even after a mismatch, so every rank issues the
    same collectives in the same order (an early ``raise`` on one rank would leave the others waiting)."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def equal(self, what: str, compute: Callable[[], Any], want: Any) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                got = compute()
                if isinstance(got, dt.DTensor):
                    got = got.full_tensor()
            equal(got, want)
        except Exception as e:  # noqa: BLE001 - AssertionError included
            self.problems.append(f"{what}: {type(e).__name__}: {e}")

    def reductions(self, x: dt.DTensor, full: np.ndarray, fns: Sequence[Any]) -> None:
        """``fn(x, axis)`` equals ``fn(full, axis)`` for every fn and axis (None and each dim)."""
        for fn in fns:
            for axis in [None, *range(full.ndim)]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    want = np.asarray(fn(full, axis=axis))
                self.equal(f"np.{fn.__name__}(axis={axis})", lambda fn=fn, axis=axis: fn(x, axis=axis), want)

    def done(self) -> None:
        if self.problems:
            raise AssertionError("\n        ".join(self.problems))


def _p(placements: Sequence[Any]) -> str:
    return placements_str(tuple(placements))


def test_catalogue_nan_inf_and_sizes_0_and_1(world):
    cat = Catalogue(world)
    meshes = [cat.mesh] + ([two_d_mesh(world)] if two_d_mesh(world) is not None else [])

    # -- NaN and inf pass through distribute, reductions and Partial like NumPy ----------
    for mesh in meshes:
        k = mesh.ndim
        rest = [R] * (k - 1)
        for full in (NAN_1D, NAN_2D):
            shardings = [[Shard(0), *rest], [R] * k]
            if full.ndim == 2:
                shardings.append([Shard(1), *rest])
            if k == 2:
                shardings.append([Shard(0), Shard(0)])
                if full.ndim == 2:
                    shardings += [[Shard(0), Shard(1)], [Shard(1), Shard(0)]]
            for placements in shardings:
                def reductions(full=full, placements=placements, mesh=mesh):
                    steps = Steps()
                    x = dt.distribute_tensor(full, mesh, placements)
                    steps.equal("full_tensor", lambda: x, full)
                    steps.reductions(x, full, (np.max, np.min, np.sum, np.mean))
                    steps.done()

                cat.works(f"NaN/inf: np.max/min/sum/mean of a {full.shape} array on {mesh.shape} {_p(placements)}",
                          reductions)
            for op in ("sum", "max", "min", "avg"):
                cat.works(f"NaN/inf: full_tensor of {_p([Partial(op)] * k)} of a {full.shape} array on {mesh.shape}",
                          lambda op=op, full=full, mesh=mesh: equal(
                              dt.distribute_tensor(full, mesh, [Partial(op)] * mesh.ndim).full_tensor(), full))

        # Partial shards holding NaN/inf on some ranks only: reduced like NumPy, NaN positions included
        last = mesh.world_size - 1

        def shard_of(r: int, last: int = last) -> np.ndarray:
            return np.array([NAN, INF, -INF, 1.0]) if r == last else np.array([1.0, 2.0, 3.0, NAN if r == 0 else 4.0])

        for op, ufunc in (("sum", np.add), ("max", np.maximum), ("min", np.minimum)):
            want = ufunc.reduce([shard_of(r) for r in range(mesh.world_size)])
            for target in ([R] * k, [Shard(0), *rest]):
                cat.works(f"NaN/inf: {_p([Partial(op)] * k)} with NaN/inf on ranks 0 and {last} -> {_p(target)} on {mesh.shape}",
                          lambda op=op, want=want, target=target, mesh=mesh, shard_of=shard_of: equal(
                              dt.DTensor.from_local(per_rank(world, mesh, shard_of), mesh, [Partial(op)] * mesh.ndim)
                              .redistribute(target).full_tensor(), want))

    # -- size 0: empty arrays, identities where NumPy has them, ValueError where it raises --
    mesh = cat.mesh
    for dtype in ("float64", "int64", "bool"):
        for full in (np.zeros((0, 3), dtype), np.zeros((3, 0), dtype), np.zeros(0, dtype)):
            for placements in [[R]] + [[Shard(d)] for d in range(full.ndim)]:
                where = f"a {dtype} {full.shape} array on {_p(placements)}"

                def empty_ops(full=full, placements=placements):
                    steps = Steps()
                    x = dt.distribute_tensor(full, mesh, placements)
                    steps.equal("full_tensor", lambda: x, full)
                    targets = [[R]] + [[Shard(d)] for d in range(full.ndim)] + ([[Partial("sum")]] if placements == [R] else [])
                    for target in targets:
                        steps.equal(f"redistribute to {_p(target)}", lambda target=target: x.redistribute(target), full)
                    steps.reductions(x, full, (np.sum, np.prod, np.any, np.all, np.mean))
                    for axis in [d for d in range(full.ndim) if full.shape[d] != 0]:  # an empty result, no error
                        steps.equal(f"np.max(axis={axis})", lambda axis=axis: np.max(x, axis=axis), np.max(full, axis=axis))
                    if full.dtype.kind != "b":
                        steps.equal("x + 1", lambda: x + 1, full + 1)
                    steps.done()

                cat.works(f"{where}: distribute, redistribute, sum/prod/any/all/mean equal NumPy", empty_ops)
                if dtype != "float64" and placements != [Shard(0)]:
                    continue
                x = dt.distribute_tensor(full, mesh, placements)
                for fn in (np.max, np.min):  # no identity: NumPy's ValueError, on every rank
                    for axis in [None] + [d for d in range(full.ndim) if full.shape[d] == 0]:
                        cat.raises(f"np.{fn.__name__}(axis={axis}) of {where}", ValueError,
                                   rf"zero-size array to reduction operation {fn.__name__}imum which has no identity",
                                   lambda fn=fn, axis=axis, x=x: fn(x, axis=axis))

    # -- size 1: one-element dims sharded over more ranks than elements; 0-d arrays -----
    one_row = np.arange(3.0).reshape(1, 3)
    column = np.array([[2.0], [3.0]])
    zero_d = np.array(4.5)
    for mesh in meshes:
        k = mesh.ndim
        rest = [R] * (k - 1)
        for placements in ([Shard(0), *rest], [Shard(0)] * k, [Shard(1)] * k):
            def size_one(placements=placements, mesh=mesh, rest=rest):
                steps = Steps()
                x = dt.distribute_tensor(one_row, mesh, placements)
                steps.equal("full_tensor", lambda: x, one_row)
                steps.reductions(x, one_row, (np.sum, np.max, np.min, np.mean, np.prod))
                steps.equal("x * 2 + 1", lambda: x * 2 + 1, one_row * 2 + 1)
                steps.equal("redistribute to S(1)", lambda: x.redistribute([Shard(1), *rest]), one_row)
                steps.equal("x.T", lambda: x.T, one_row.T)
                steps.done()

            cat.works(f"a (1, 3) array on {mesh.shape} {_p(placements)}: reductions, ops, redistribute", size_one)
        for pc, pr in ((Shard(1), Shard(0)), (Shard(1), R), (R, Shard(0))):
            cat.works(f"(2, 1) @ (1, 3) with the size-1 dim {pc}/{pr} on {mesh.shape}",
                      lambda pc=pc, pr=pr, mesh=mesh, rest=rest: equal(
                          (dt.distribute_tensor(column, mesh, [pc, *rest]) @ dt.distribute_tensor(one_row, mesh, [pr, *rest]))
                          .full_tensor(), column @ one_row))

        def tail_from_local(mesh=mesh):
            full = np.arange(5.0)  # 5 elements over up to 8 ranks: torch.chunk leaves the tail ranks empty
            placements = [Shard(0)] + [R] * (mesh.ndim - 1)

            def shard(r: int) -> np.ndarray:
                shape, offset = dt.compute_local_shape_and_global_offset(full.shape, mesh, placements, mesh.coordinate_of(r))
                return full[offset[0]:offset[0] + shape[0]]

            steps = Steps()
            x = dt.DTensor.from_local(per_rank(world, mesh, shard), mesh, placements)
            steps.equal("shape", lambda: np.array(x.shape), np.array(full.shape))
            steps.equal("full_tensor", lambda: x, full)
            steps.equal("np.sum", lambda: np.sum(x), np.asarray(full.sum()))
            steps.done()

        cat.works(f"from_local with empty tail shards on {mesh.shape}", tail_from_local)

        for placements in ([R] * k, [Partial("sum"), *rest], [Partial("max")] * k):
            def zero_dim(placements=placements, mesh=mesh):
                steps = Steps()
                x = dt.distribute_tensor(zero_d, mesh, placements)
                steps.equal("full_tensor", lambda: x, zero_d)
                steps.equal("x + 1", lambda: x + 1, zero_d + 1)
                steps.equal("np.sum", lambda: np.sum(x), np.asarray(np.sum(zero_d)))
                steps.equal("redistribute to R", lambda: x.redistribute([R] * mesh.ndim), zero_d)
                steps.done()

            cat.works(f"a 0-d array on {mesh.shape} {_p(placements)}", zero_dim)
    cat.raises("len() of a 0-d DTensor", TypeError, r"len\(\) of a 0-d DTensor",
               lambda: len(dt.distribute_tensor(np.array(1.0), cat.mesh, [R])))
    cat.finish()


# ---------------------------------------------------------------------------
# 4. bad input on ONE rank: every rank must raise, none may wait forever
# ---------------------------------------------------------------------------
ONE_RANK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading
    import numpy as np
    import dtensor_np as dt
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    mesh = dt.init_device_mesh((n,))
    bad = n - 1
    case, WATCHDOG_S, OUT = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    report = open(os.path.join(OUT, f"{case}.{rank}.txt"), "w", buffering=1)  # one file per rank: no interleaving

    def hung():
        report.write("HUNG " + json.dumps(rank) + "\\n")
        report.flush()
        os._exit(3)

    watchdog = threading.Timer(WATCHDOG_S, hung)  # mpi4py releases the GIL while it waits in MPI
    watchdog.daemon = True
    watchdog.start()
    good = np.arange(4.0 * n).reshape(2 * n, 2)
    try:
        if case == "distribute_object_dtype":
            dt.distribute_tensor(good.astype(object) if rank == bad else good, mesh, [dt.Shard(0)])
        elif case == "distribute_placements_fit_one_rank_only":
            dt.distribute_tensor(good[:, 0] if rank == bad else good, mesh, [dt.Shard(1)])
        elif case == "from_local_mapping_on_one_rank":
            local = np.arange(2.0)
            dt.DTensor.from_local({rank: local} if rank == bad else local, mesh, [dt.Shard(0)])
        elif case == "distribute_shape_on_one_rank":
            dt.distribute_tensor(good[:-1] if rank == bad else good, mesh, [dt.Shard(0)])
        elif case == "distribute_dtype_on_one_rank_without_a_source":
            dt.distribute_tensor(good.astype(np.float32) if rank == bad else good, mesh, [dt.Shard(0)], src_data_rank=None)
        elif case == "from_local_replicated_data_differs_on_one_rank":
            dt.DTensor.from_local(good + (rank == bad), mesh, [dt.Replicate()])
        elif case == "from_local_placements_differ_on_one_rank":
            dt.DTensor.from_local(np.arange(2.0), mesh, [dt.Replicate()] if rank == bad else [dt.Shard(0)])
        elif case == "distribute_masked_on_one_rank":
            dt.distribute_tensor(np.ma.masked_array(good, mask=good > 3) if rank == bad else good, mesh, [dt.Shard(0)])
        elif case == "from_local_masked_on_one_rank":
            local = np.arange(2.0)
            dt.DTensor.from_local(np.ma.masked_array(local) if rank == bad else local, mesh, [dt.Shard(0)])
        else:
            raise SystemExit("unknown case " + case)
        outcome = [rank, "", ""]
    except Exception as e:
        outcome = [rank, type(e).__name__, str(e)]
    report.write("OUTCOME " + json.dumps(outcome) + "\\n")
    full = np.arange(2.0 * n + 1)
    try:  # the ranks are in step again: one distribute + full_tensor gives every rank the array
        got = dt.distribute_tensor(full, mesh, [dt.Shard(0)]).full_tensor()
        after = "" if np.array_equal(got, full) else "full_tensor gave " + repr(got.tolist())
    except Exception as e:
        after = type(e).__name__ + ": " + str(e)
    watchdog.cancel()
    report.write("INSTEP " + json.dumps([rank, after]) + "\\n")
    report.close()
    """
)

# case -> (expected error type on every rank, fragment every rank's message must contain, what happens now)
ONE_RANK_CASES = {
    # Regression: dtensor.py distribute_tensor: check_array() raises on the bad rank before the broadcast; the others wait in it.
    "distribute_object_dtype": (
        "TypeError", "rank {bad}",
        "rank {bad} raises TypeError (object dtype, no rank named) before the broadcast; the other ranks stay in the "
        "broadcast, which pairs with rank {bad}'s NEXT collective, so they raise a CollectiveError about that other "
        "call (or hang, if the next call differs)",
    ),
    # Regression: dtensor.py distribute_tensor: DTensorSpec() raises on the bad rank (S(1) on a 1-d array) before the broadcast.
    "distribute_placements_fit_one_rank_only": (
        "ShardingError", "rank {bad}",
        "rank {bad} raises ShardingError 'S(1) is out of range for a 1-d array' before the broadcast; the other "
        "ranks stay in the broadcast and fail or hang on rank {bad}'s next collective",
    ),
    # Regression: from_local.py build_from_local: the mapping check raises before the shared check (gather_descriptors).
    "from_local_mapping_on_one_rank": (
        "TypeError", "rank {bad}",
        "rank {bad} raises TypeError 'under MPI, from_local takes this rank's own array' before the shared check; "
        "the other ranks stay in gather_descriptors' Allgather, which pairs with rank {bad}'s next collective: "
        "hang or MPI abort",
    ),
    # Regression: dtensor.py distribute_tensor broadcast the root's array into buffers shaped by each rank's own array.
    "distribute_shape_on_one_rank": (
        "ShardingError", "on rank {bad}",
        "rank {bad}'s broadcast buffer has another size than the root's: MPI truncation error or garbage",
    ),
    # Regression: with src_data_rank=None every rank used its own dtype and shape, unchecked.
    "distribute_dtype_on_one_rank_without_a_source": (
        "ShardingError", "on rank {bad}",
        "rank {bad} silently held float32 shards of a DTensor the others hold as float64",
    ),
    # Regression: from_local accepted Replicate data that differs by rank; later results differed by rank.
    "from_local_replicated_data_differs_on_one_rank": (
        "ShardingError", "rank(s) [{bad}]",
        "accepted: np.sum of the DTensor gave a different number on rank {bad}",
    ),
    # Regression: from_local with different placements per rank gave every rank its own spec; the next collective hung.
    "from_local_placements_differ_on_one_rank": (
        "ShardingError", "ranks [{bad}]",
        "accepted with different specs per rank: the next collectives pair up wrongly or hang",
    ),
    # Regression: a masked array was distributed as its data (mask dropped) on rank {bad} only.
    "distribute_masked_on_one_rank": (
        "TypeError", "rank {bad}",
        "no error: rank {bad}'s masked array was taken as its data, its mask dropped",
    ),
    "from_local_masked_on_one_rank": (
        "TypeError", "rank {bad}",
        "no error: rank {bad}'s masked shard was taken as its data, its mask dropped",
    ),
}


@pytest.mark.parametrize("ranks", [2, 4])
def test_bad_input_on_one_rank_raises_on_every_rank_without_a_hang(tmp_path: Path, ranks: int):
    """One rank's input is wrong, the others' right: every rank raises the same type naming that rank, then all go on."""
    script = tmp_path / "one_rank.py"
    script.write_text(ONE_RANK_SCRIPT)
    mpiexec = MPIEXEC
    watchdog_s = 8.0
    jobs = {
        case: subprocess.Popen(
            [str(mpiexec), "-n", str(ranks), sys.executable, str(script), case, str(watchdog_s), str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=default_env(), start_new_session=True,
        )
        for case in ONE_RANK_CASES
    }
    deadline = time.monotonic() + 90
    outputs = {}
    for case, proc in jobs.items():
        try:
            outputs[case], _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            outputs[case] = proc.communicate()[0] + "\n<killed: the job outlived the watchdog>"
    failures = []
    bad = ranks - 1
    for case, (error, fragment, now) in ONE_RANK_CASES.items():
        fragment = fragment.format(bad=bad)
        outcomes, after, hung = {}, {}, set()
        lines = [line for r in range(ranks) if (tmp_path / f"{case}.{r}.txt").exists()
                 for line in (tmp_path / f"{case}.{r}.txt").read_text().splitlines()]
        for line in lines:
            tag, _, payload = line.partition(" ")
            if tag == "OUTCOME":
                rank, kind, message = json.loads(payload)
                outcomes[rank] = (kind, message)
            elif tag == "INSTEP":
                rank, problem = json.loads(payload)
                after[rank] = problem
            elif tag == "HUNG":
                hung.add(json.loads(payload))
        problems = []
        for r in range(ranks):
            if r not in outcomes:
                why = f"the watchdog fired after {watchdog_s:.0f} s" if r in hung else "the job ended first"
                problems.append(f"rank {r} never came back from the call ({why})")
            elif outcomes[r][0] != error or fragment not in outcomes[r][1]:
                problems.append(f"rank {r} raised {outcomes[r][0] or 'nothing'}: {outcomes[r][1]!r}")
            elif r not in after:
                problems.append(f"rank {r} raised, then never finished the next distribute + full_tensor")
            elif after[r]:
                problems.append(f"rank {r} raised, then the next distribute + full_tensor failed: {after[r]}")
        if problems:
            failures.append(
                f"{case} [regression: expected {error} naming {fragment!r} on every rank; now {now.format(bad=bad)}]\n    "
                + "\n    ".join(problems)
            )
    if failures:
        pytest.fail(f"mpiexec -n {ranks}, one rank's input wrong:\n" + "\n".join(failures), pytrace=False)
