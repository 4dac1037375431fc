"""The comparison table of the documentation: every name of NumPy's API, and what dtensor_np does with it.

A documentation tool, not part of the package: it imports ``dtensor_np`` as
any user does.  Its one source is the catalogue
(:func:`dtensor_np.functions.catalogue`, built on
:mod:`dtensor_np.numpy_catalogue`): for every name of NumPy's main namespace,
``numpy.linalg``, ``numpy.fft`` and ``ndarray``, a case to run, a refusal with
its reason, or nothing (missing).  Each case is called on a simulated mesh of
2 ranks, once per input placement kind, and the table records the result's
placements and the collectives that ran (``dt.comm_counter()``), and whether
``dt.trace`` records the call.

The outcome is committed as ``docs/numpy_api.json`` (the snapshot): the docs
build (the ``operation_table`` extension) and ``tests/test_docs.py`` run the
catalogue again and fail when the code and the snapshot disagree, naming each
difference; ``tests/test_numpy_api.py`` checks its collective counts on 2
simulated ranks and under ``mpiexec -n 2``.  After a deliberate change::

    python docs/_ext/api_table.py --write     # rewrites docs/numpy_api.json; review its diff

Input placement kinds (a 1-D mesh of 2):

* ``S(untouched)``: sharded on a dim the call does not work along;
* ``S(op axis)``: sharded on the dim it reduces, contracts, transforms or slices;
* ``R``: replicated; ``P(sum)``: a pending sum (float inputs only).

Example:
    >>> rows = table_rows()
    >>> rows["numpy.sum"]["cells"]["S(op axis)"], rows["numpy.abs"]["status"]
    ('P(sum)', 'local')
"""

from __future__ import annotations

import json
import sys
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import numpy as np

import dtensor_np as dt
from dtensor_np.functions import catalogue
from dtensor_np.numpy_catalogue import Case, Refused, numpy_names, outcome

__all__ = ["KINDS", "SNAPSHOT", "table_rows", "counts", "differences", "markdown_table", "main"]

KINDS = ("S(untouched)", "S(op axis)", "R", "P(sum)")
"""The input placement kinds, the table's columns."""

SNAPSHOT = Path(__file__).resolve().parent.parent / "numpy_api.json"
"""The committed outcome of the catalogue (what the docs build and the tests compare against)."""

SECTIONS = ("numpy", "numpy.linalg", "numpy.fft", "ndarray")


def _section(name: str) -> str:
    return name.rpartition(".")[0]


def _placements(case: Case) -> dict[str, Optional[Any]]:
    float_like = np.dtype(case.dtype).kind in "fc"
    return {
        "S(untouched)": None if case.untouched is None else dt.Shard(case.untouched),
        "S(op axis)": None if case.axis is None else dt.Shard(case.axis),
        "R": dt.Replicate(),
        "P(sum)": dt.Partial("sum") if float_like else None,
    }


def _run(case: Case, mesh: Any, placement: Any) -> str:
    data = case.input()
    if isinstance(placement, dt.Partial):
        x = dt.distribute_tensor(data, mesh, [dt.Replicate()]).redistribute([placement])
    else:
        x = dt.distribute_tensor(data, mesh, [placement])
    try:
        with dt.comm_counter() as counter, dt.implicit_gather("allow"), np.errstate(all="ignore"):
            result = case.call(x)
    except Exception as e:  # noqa: BLE001  (the table says what it raised; NumPy raises there too: tested)
        return type(e).__name__
    return outcome(result, counter.counts, counter.implicit_gathers)


def _traceable(case: Case) -> bool:
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            dt.trace(case.call, dt.ShapeDtype(case.shape, case.dtype))
    except Exception:  # noqa: BLE001  (not traceable, whatever the reason)
        return False
    return True


def _status(cells: dict[str, str], case: Case) -> str:
    if any(c.endswith(("Error", "Exception")) for k, c in cells.items() if k != "P(sum)"):
        return "fails"  # the tests fail too (NumPy gives a value there): not counted as covered
    if case.gathers or any("implicit gather" in c for c in cells.values()):
        return "gathers"
    return "moves" if any("·" in c for k, c in cells.items() if k != "P(sum)") else "local"


@lru_cache(maxsize=1)
def _rows() -> str:
    mesh = dt.init_device_mesh((2,), backend="simulated")
    entries = catalogue()
    rows: dict[str, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}  # an alias shares its entry: run it once
    for name in numpy_names():
        entry = entries.get(name)
        if entry is None:
            rows[name] = {"status": "missing"}
        elif isinstance(entry, Refused):
            rows[name] = {"status": "refused" if entry.applicable else "n/a", "reason": entry.reason}
        elif id(entry) in done:
            rows[name] = dict(done[id(entry)])
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cells = {k: "" if p is None else _run(entry, mesh, p) for k, p in _placements(entry).items()}
            rows[name] = done[id(entry)] = {"status": _status(cells, entry), "cells": cells,
                                            "traceable": _traceable(entry)}
    return json.dumps(rows, indent=1, sort_keys=True, ensure_ascii=False)


def table_rows() -> dict[str, dict[str, Any]]:
    """Every name's row: ``status`` (local, moves, gathers, fails, refused, n/a, missing), and ``cells`` (one per input
    kind) and ``traceable`` for a covered name, ``reason`` for a refused one (computed once, then cached)."""
    return json.loads(_rows())


def counts(rows: dict[str, dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """Per section: (covered, applicable, all names); applicable leaves out the ``n/a`` names.

    Example:
        >>> counts({"numpy.a": {"status": "local"}, "numpy.b": {"status": "n/a"}, "numpy.c": {"status": "missing"}})
        {'numpy': (1, 2, 3)}
    """
    out = {}
    for section in SECTIONS:
        members = [r for n, r in rows.items() if _section(n) == section]
        if members:
            covered = sum(r["status"] in ("local", "moves", "gathers") for r in members)
            applicable = sum(r["status"] != "n/a" for r in members)
            out[section] = (covered, applicable, len(members))
    return out


def differences(fresh: dict[str, Any], committed: dict[str, Any]) -> list[str]:
    """What the code does that the snapshot does not say, one line a name.

    Example:
        >>> differences({"numpy.a": {"status": "local"}}, {"numpy.a": {"status": "missing"}})
        ["numpy.a: the code gives {'status': 'local'}, the snapshot says {'status': 'missing'}"]
    """
    out = []
    for name in sorted(set(fresh) | set(committed)):
        if fresh.get(name) != committed.get(name):
            out.append(f"{name}: the code gives {fresh.get(name)}, the snapshot says {committed.get(name)}")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


_TITLES = {"numpy": "The main namespace (`numpy.*`)", "numpy.linalg": "`numpy.linalg`", "numpy.fft": "`numpy.fft`",
           "ndarray": "Array methods and attributes (`ndarray.*`)"}


def markdown_table(rows: Optional[dict[str, dict[str, Any]]] = None) -> str:
    """The comparison table as MyST markdown: the counts, then one table a section."""
    rows = table_rows() if rows is None else rows
    lines = ["| section | covered | applicable | coverage | names |", "|---|---|---|---|---|"]
    for section, (covered, applicable, total) in counts(rows).items():
        lines.append(f"| {_TITLES[section]} | {covered} | {applicable} | {100 * covered / applicable:.1f} % | {total} |")
    lines.append("")
    for section in SECTIONS:
        members = sorted((n, r) for n, r in rows.items() if _section(n) == section)
        lines += [f"## {_TITLES[section]}", "", "| name | status | " + " | ".join(KINDS) + " | traceable |",
                  "|---" * (len(KINDS) + 3) + "|"]
        for name, row in members:
            if "cells" in row:
                cells = " | ".join(_cell(row["cells"][k]) for k in KINDS)
                lines.append(f"| `{name}` | {row['status']} | {cells} | {'yes' if row['traceable'] else 'no'} |")
            else:
                why = _cell(row.get("reason", "no sharding rule yet: `dt.ShardingError`"))
                lines.append(f"| `{name}` | {row['status']} | {why} |" + " |" * len(KINDS))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``--write``: rewrite the snapshot; otherwise compare the code with it (exit 1 on a difference)."""
    fresh = table_rows()
    if "--write" in argv:
        SNAPSHOT.write_text(json.dumps(fresh, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        for section, (covered, applicable, total) in counts(fresh).items():
            print(f"{section}: {covered} of {applicable} applicable ({total} names)")
        return 0
    diff = differences(fresh, json.loads(SNAPSHOT.read_text()))
    print("\n".join(diff) or "the snapshot matches the code")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
