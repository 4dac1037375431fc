"""Sphinx extension: writes the operation table from the rule registry when the build starts.

The table is computed by ``rule_table`` beside this file (each rule run on a
simulated mesh of 2 ranks), never written by hand; ``operations.md``
includes the generated file.  It also copies the committed notebooks into
``docs/notebooks/`` (rendered with their stored outputs, never executed).
"""

from pathlib import Path


def _write(app):
    from rule_table import markdown_table

    out = Path(app.srcdir) / "_generated" / "operations_table.md"
    out.parent.mkdir(exist_ok=True)
    text = markdown_table()
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
