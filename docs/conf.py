"""Sphinx configuration of the dtensor_np documentation site (build: see README, "Documentation")."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))

project = "dtensor_np"
author = "dtensor_np developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_nb",
    "operation_table",
]

# myst_nb renders the committed notebooks with their stored outputs: never re-executed at build time.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}

exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]
suppress_warnings = ["misc.highlighting_failure"]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autosummary_generate = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "dtensor_np"
