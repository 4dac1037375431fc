"""The documentation site stays true: every guide example runs, every public name has an example, the table matches the rules.

* Every ```pycon block (a doctest) and ```python block (run as a script) of
  ``docs/*.md`` and ``docs/guide/*.md`` runs, in order, one test per page,
  on the simulated backend.
* Every name in ``__all__`` of ``dtensor_np``, ``dtensor_np.array_api``,
  ``dtensor_np.passes``, ``dtensor_np.optim`` and ``collectives`` has a
  docstring with an example (``>>>``); a constant or type alias, which cannot
  carry a docstring of its own, appears in a ``>>>`` line of its module's
  docstring.
* The comparison table names every name of NumPy's API, and the committed
  snapshot (``docs/numpy_api.json``) says what the code does.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([*DOCS.glob("*.md"), *(DOCS / "guide").glob("*.md")])
BLOCK = re.compile(r"^```(pycon|python)\n(.*?)^```", re.S | re.M)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run_page(path: Path) -> int:
    """Run every code block of a page in one namespace; the number of blocks run."""
    text = path.read_text()
    globs: dict = {"__name__": "__docs__"}
    blocks = BLOCK.findall(text)
    for i, (kind, code) in enumerate(blocks):
        if kind == "python":
            exec(compile(code, f"{path.name}[block {i}]", "exec"), globs)
            continue
        test = doctest.DocTestParser().get_doctest(code, globs, f"{path.name}[block {i}]", str(path), 0)
        runner = doctest.DocTestRunner(optionflags=FLAGS)
        runner.run(test, out=lambda s: None, clear_globs=False)
        if runner.failures:
            report = []
            runner = doctest.DocTestRunner(optionflags=FLAGS)
            runner.run(doctest.DocTestParser().get_doctest(code, dict(globs), test.name, str(path), 0),
                       out=report.append, clear_globs=False)
            pytest.fail("".join(report))
        globs = test.globs
    return len(blocks)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_guide_page_examples_run(page):
    run_page(page)


# performance.md includes benchmarks/README.md, whose commands run under mpiexec for minutes.
NO_EXAMPLES = {"performance.md"}


def test_every_guide_page_has_examples():
    bare = [p.name for p in PAGES if p.parent.name == "guide" and p.name not in NO_EXAMPLES
            and not BLOCK.search(p.read_text())]
    assert not bare, f"guide pages without a runnable example: {bare}"


PUBLIC = ["dtensor_np", "dtensor_np.array_api", "dtensor_np.passes", "dtensor_np.optim", "dtensor_np.checkpoint",
          "dtensor_np.testing", "dtensor_np.notebook",
          "collectives"]


def _lacking(modname: str) -> list[str]:
    module = importlib.import_module(modname)
    module_doc = inspect.getdoc(module) or ""
    doctest_lines = "\n".join(line for line in module_doc.splitlines() if ">>>" in line or "..." in line)
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            doc = inspect.getdoc(obj)
        elif (inspect.isclass(obj) or inspect.isroutine(obj) or hasattr(obj, "__wrapped__")) and str(
            getattr(obj, "__module__", "")
        ).split(".")[0] in ("dtensor_np", "collectives"):
            doc = obj.__doc__ and inspect.cleandoc(obj.__doc__)
        else:  # a constant or type alias: shown in the module's example
            doc = f">>> {name}" if re.search(rf"\b{name}\b", doctest_lines) else None
        if not doc or ">>>" not in doc:
            missing.append(f"{modname}.{name}")
    return missing


@pytest.mark.parametrize("modname", PUBLIC)
def test_every_public_name_has_a_docstring_with_an_example(modname):
    assert _lacking(modname) == []


def test_the_api_reference_documents_every_public_module():
    for modname in PUBLIC:
        page = (DOCS / "api" / f"{modname}.md").read_text()
        assert f".. automodule:: {modname}" in page


def _api_table():
    """docs/_ext/api_table.py, the documentation's tool that runs the catalogue (not a module of the package)."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import api_table
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    return api_table


def test_the_comparison_table_snapshot_matches_the_code():
    """docs/numpy_api.json says what every name does; the docs build fails on the same comparison."""
    table = _api_table()
    diff = table.differences(table.table_rows(), json.loads(table.SNAPSHOT.read_text()))
    assert not diff, "run `python docs/_ext/api_table.py --write` after a deliberate change:\n" + "\n".join(diff[:30])


def test_the_comparison_table_names_every_name_of_numpys_api():
    from dtensor_np.numpy_catalogue import numpy_names

    table = _api_table()
    rows = table.table_rows()
    assert sorted(rows) == numpy_names()
    text = table.markdown_table(rows)
    named = re.findall(r"^\| `([\w.]+)` \| (?:local|moves|gathers|fails|refused|n/a|missing) \|", text, re.M)
    assert sorted(named) == sorted(rows)


def test_the_comparison_table_says_what_runs():
    rows = _api_table().table_rows()
    assert rows["numpy.sum"]["cells"] == {"S(untouched)": "S(0)", "S(op axis)": "P(sum)", "R": "R", "P(sum)": "P(sum)"}
    assert rows["numpy.exp"]["cells"]["P(sum)"] == "R · all_reduce"
    assert rows["numpy.linalg.inv"]["cells"]["S(op axis)"] == "S(0) · all_to_all"
    assert rows["numpy.exp"]["traceable"] and rows["numpy.exp"]["status"] == "local"
    assert rows["numpy.abs"] == rows["numpy.absolute"]  # an alias shares its entry
