"""Sphinx extension: writes the comparison table of NumPy's API when the build starts, and fails the build
when the code and the committed snapshot (``docs/numpy_api.json``) disagree.

The table is computed by ``api_table`` beside this file (every case of the
catalogue run on a simulated mesh of 2 ranks), never written by hand;
``operations.md`` includes the generated file.  It also copies the committed notebooks into
``docs/notebooks/`` (rendered with their stored outputs, never executed).
"""

from pathlib import Path


def _write(app):
    import json

    from api_table import SNAPSHOT, differences, markdown_table, table_rows
    from sphinx.errors import ExtensionError

    rows = table_rows()
    diff = differences(rows, json.loads(SNAPSHOT.read_text()))
    if diff:
        raise ExtensionError("the comparison table and the code disagree (run `python docs/_ext/api_table.py "
                             "--write` after a deliberate change, and review the diff):\n" + "\n".join(diff[:30]))
    out = Path(app.srcdir) / "_generated" / "operations_table.md"
    out.parent.mkdir(exist_ok=True)
    text = markdown_table(rows)
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


def _copy_notebooks(app):
    """The committed notebooks (with their stored outputs) into docs/notebooks/, rendered without executing."""
    import shutil

    src = Path(app.srcdir).parent / "notebooks"
    dst = Path(app.srcdir) / "notebooks"
    dst.mkdir(exist_ok=True)
    for nb in sorted(src.glob("*.ipynb")):
        target = dst / nb.name
        if not target.exists() or target.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, target)


def setup(app):
    app.connect("builder-inited", _write)
    app.connect("builder-inited", _copy_notebooks)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
