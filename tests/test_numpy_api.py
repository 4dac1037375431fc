"""Every covered name of NumPy's API (dtensor_np.numpy_catalogue), on DTensors against NumPy.

Each :class:`~dtensor_np.numpy_catalogue.Case` runs on its input placed three
ways on a 1-D mesh: sharded on a dim the op does not work along
(``untouched``), sharded on the dim it works along (``axis``), replicated; with
the default shape (5, 4) the shards are uneven on 2 to 4 ranks and the last
rank's is empty for 5 rows over 4 ranks (2, 2, 1, 0) and 4 columns over 3
ranks (2, 2, 0) (a case with its own shape has its own).  The result equals
NumPy's (values, shape, dtype; a DTensor where NumPy gives an array, a Python
or NumPy scalar where NumPy gives one), on every rank, the untouched and replicated placements issue no collective (the walk of
"no collective along untouched axes" over every name), and on 2 ranks the
result's placements and the collectives counted are those the documentation's
table says (``docs/numpy_api.json``: the collective counts of every rule).  Simulated on 1 to 4
ranks; under ``mpiexec -n 2`` one job for every case.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dtensor_np as dt
from collectives import comm_counter
from dtensor_np import Replicate, Shard
from dtensor_np.functions import catalogue_cases
from dtensor_np.numpy_catalogue import Case, outcome

GROUPS = sorted({group for group, _, _ in catalogue_cases()})
SNAPSHOT = json.loads((Path(__file__).resolve().parent.parent / "docs" / "numpy_api.json").read_text())
"""What the documentation's table says each case does on 2 ranks (docs/_ext/api_table.py writes it)."""
COLUMN = {"untouched": "S(untouched)", "axis": "S(op axis)", "replicated": "R"}
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def _as_numpy(value: Any) -> Any:
    if isinstance(value, dt.DTensor):
        value = value.full_tensor()
    if hasattr(value, "get") and hasattr(value, "device") and not isinstance(value, np.ndarray):
        return value.get()  # a CuPy array (a result on the device)
    if isinstance(value, (tuple, list)):
        return type(value)(_as_numpy(v) for v in value)
    return value


def _compare(name: str, got: Any, want: Any, case: Case) -> list[str]:
    """``got`` (from DTensors, gathered) against NumPy's ``want``: structure, type of the results, values."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return [f"{name}: expected a sequence of {len(want)}, got {type(got).__name__}"]
        return [e for i, (g, w) in enumerate(zip(got, want)) for e in _compare(f"{name}[{i}]", g, w, case)]
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray):
            return [f"{name}: expected an array (a DTensor), got {type(got).__name__}"]
        if got.shape != want.shape or got.dtype != want.dtype:
            return [f"{name}: shape/dtype {got.shape} {got.dtype}, NumPy's {want.shape} {want.dtype}"]
    got_a, want_a = np.asarray(got), np.asarray(want)
    if case.tolerance and want_a.dtype.kind in "fc":
        eps = np.finfo(want_a.dtype).eps * case.tolerance
        ok = np.allclose(got_a, want_a, rtol=eps, atol=eps, equal_nan=True)
    else:
        ok = got_a.shape == want_a.shape and bool(np.all((got_a == want_a) | (got_a != got_a) & (want_a != want_a)))
    return [] if ok else [f"{name}: {got_a.tolist()} != NumPy's {want_a.tolist()}"]


def _family(error: Exception) -> type:
    """The exception family NumPy's error belongs to (a ``ValueError`` or a ``TypeError``; else its own type)."""
    for family in (IndexError, ValueError, TypeError):
        if isinstance(error, family):
            return family
    return type(error)


def _placements(case: Case) -> list[tuple[str, Any]]:
    out = []
    if case.untouched is not None:
        out.append(("untouched", Shard(case.untouched)))
    if case.axis is not None:
        out.append(("axis", Shard(case.axis)))
    out.append(("replicated", Replicate()))
    return out


def _run_groups(world: Any, groups: Any, xp: Any) -> None:
    """Every case of ``groups`` on shards of ``xp`` (NumPy, or CuPy on a GPU) against NumPy; fails every rank
    together with the first 20 differences."""
    mesh = dt.DeviceMesh((world.size,), backend=world.kind)
    errors: list[str] = []
    for case_group, name, case in catalogue_cases():
        if case_group not in groups:
            continue
        a = case.input()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                want = case.call(a.copy())
            except Exception as e:  # noqa: BLE001 - NumPy refuses: so must dtensor_np, with the same kind
                want = e
            for kind, placement in _placements(case):
                x = dt.distribute_tensor(xp.asarray(a), mesh, [placement])
                where = f"{name} {kind} {placement}"
                try:
                    with comm_counter() as counter:
                        got = case.call(x)
                except Exception as e:  # noqa: BLE001
                    if not isinstance(want, Exception) or not isinstance(e, _family(want)):
                        errors.append(f"{where}: raised {type(e).__name__}: {e}; NumPy "
                                      f"{'raised ' + repr(want) if isinstance(want, Exception) else 'did not'}")
                    continue
                if isinstance(want, Exception):
                    errors.append(f"{where}: NumPy raised {want!r}, dtensor_np did not")
                    continue
                if kind != "axis" and counter.total and not case.gathers:
                    errors.append(f"{where}: communicated {counter} (a dim the op does not work along, or replicated)")
                said = SNAPSHOT.get(name, {}).get("cells", {}).get(COLUMN[kind])
                did = outcome(got, counter.counts, counter.implicit_gathers)
                if world.size == 2 and name in SNAPSHOT and said != did:
                    errors.append(f"{where}: {did!r}, the documentation's table says {said!r}")
                with dt.implicit_gather("allow"):
                    errors += _compare(where, _as_numpy(got), want, case)
    if world.kind == "mpi":
        every = world.backend.comm.allgather(errors)
        errors = [f"process {i}: {e}" for i, es in enumerate(every) for e in es]
    assert not errors, "\n".join(errors[:20]) + (f"\n... and {len(errors) - 20} more" if len(errors) > 20 else "")


@pytest.mark.worlds(simulated=(1, 2, 3, 4), mpi=())
@pytest.mark.parametrize("group", GROUPS)
def test_every_covered_name_matches_numpy(world, group):
    _run_groups(world, {group}, np)


@pytest.mark.worlds(simulated=(), mpi=(2,))
def test_every_covered_name_matches_numpy_under_mpi(world):
    """Every group in one ``mpiexec -n 2`` job (one job instead of one per group: the suite's wall time)."""
    _run_groups(world, set(GROUPS), np)


@pytest.mark.gpu
@pytest.mark.worlds(simulated=(2, 4), mpi=(2,) if HAS_CUPY else ())
def test_every_covered_name_matches_numpy_on_cupy_shards(world, cupy):
    """The same cases on CuPy shards (a GPU lent: skipped cleanly without CuPy or a CUDA device)."""
    _run_groups(world, set(GROUPS), cupy)


def test_every_rule_and_composite_has_a_case():
    """A NumPy callable with a sharding rule or a composite is in the catalogue: a case (run here and in the
    table), or refused with its reason (``isnat``: datetimes are never distributed)."""
    from dtensor_np.functions import catalogue
    from dtensor_np.propagation.registry import registered_callables, registered_composites

    covered = {id(v) for name in catalogue() for v in [_object(name)] if v is not None}
    numpy_callables = [f for f in (*registered_callables(), *registered_composites())
                       if (getattr(f, "__module__", None) or "numpy").startswith("numpy")]
    missing = sorted(getattr(f, "__name__", repr(f)) for f in numpy_callables if id(f) not in covered)
    assert not missing, f"callables with a rule or a composite but no entry in the catalogue: {missing}"


def _object(name: str) -> Any:
    owner, _, attr = name.partition(":")[0].rpartition(".")
    module = {"numpy": np, "numpy.linalg": np.linalg, "numpy.fft": np.fft, "ndarray": np.ndarray}.get(owner)
    return getattr(module, attr, None) if module is not None else None


def test_every_name_has_one_entry():
    """No name is a case (or a refusal) of two families: the table and the tests would say two things."""
    from dtensor_np.functions import FAMILIES

    owners: dict[str, list[str]] = {}
    for family, module in FAMILIES.items():
        for name in (*getattr(module, "CASES", {}), *getattr(module, "REFUSED", {})):
            owners.setdefault(name, []).append(family)
    assert not {n: f for n, f in owners.items() if len(f) > 1}


def test_every_name_of_numpy_is_covered_or_refused():
    """Every callable of NumPy's main namespace, ``numpy.linalg`` and ``numpy.fft`` and every public attribute
    of ``ndarray`` has an entry: a case (run against NumPy above) or a refusal with its reason.  A name NumPy
    adds in a later version fails here until it is given one."""
    from dtensor_np.functions import catalogue
    from dtensor_np.numpy_catalogue import numpy_names

    entries = catalogue()
    assert not sorted(set(numpy_names()) - set(entries))
