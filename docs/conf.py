"""Sphinx configuration of blu's documentation.

Build (warnings are errors): ``pip install -e '.[docs]' && sphinx-build -W -b html docs
docs/_build/html``.

The API reference is generated at build time from the public modules (``docs/apigen.py``): one
page per module, opening with autosummary tables grouped by topic and linking to the full entries
below (``docs/api/`` is written here and git-ignored), so it follows the code as it changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

import blu  # noqa: E402

project = "blu"
author = "the blu authors"
copyright = "2026, the blu authors"
release = version = blu.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = f"blu {release}"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
nitpicky = False
# architecture.md and primitives.md link into the source tree (paths Sphinx cannot resolve) and
# are kept as they are.
suppress_warnings = ["myst.xref_missing", "myst.header"]

# ---- the API reference, generated from the public modules (docs/apigen.py) --------------------

autosummary_generate = False  # the tables link to the entries on the module pages; no stub pages

sys.path.insert(0, str(DOCS))
import apigen  # noqa: E402

apigen.write_api(DOCS)
