"""Sphinx configuration of blu's documentation.

Build (warnings are errors): ``pip install -e '.[docs]' && sphinx-build -W -b html docs
docs/_build/html``.

The API reference is generated at build time from the public modules (``PUBLIC``): one page per
module listing every public function and class defined in blu (``docs/api/`` is written here and
git-ignored), so it follows the code as it changes.
"""

from __future__ import annotations

import importlib
import inspect
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

# ---- the API reference, generated from the public modules ----------------------------------------

PUBLIC = [
    ("blu", "Transforms, jit and the top-level API"),
    ("blu.numpy", "NumPy's API on blu arrays"),
    ("blu.numpy.linalg", "Linear algebra"),
    ("blu.lax", "Primitives (strict shapes and dtypes) and control flow"),
    ("blu.nn", "Neural-network functions"),
    ("blu.nn.initializers", "Parameter initializers"),
    ("blu.optim", "Optimizers, optax's gradient transformations and schedules"),
    ("blu.random", "Counter-based random numbers"),
    ("blu.tree_util", "Pytrees"),
    ("blu.scipy.special", "Special functions"),
    ("blu.debug", "Printing and callbacks inside jit"),
    ("blu.sharding", "Meshes and shardings"),
    ("blu.errors", "Errors"),
    ("blu.parallel", "Sharding, collectives and processes"),
    ("blu.cuda", "The GPU runtime"),
    ("blu.profiler", "Timeline traces"),
]


def _public(mod) -> tuple[list[str], list[str]]:
    """(classes, functions) defined in blu that ``mod`` exports."""
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    classes, functions = [], []
    for n in sorted(set(names), key=str.lower):
        obj = getattr(mod, n, None)
        if obj is None or inspect.ismodule(obj):
            continue
        home = getattr(obj, "__module__", "") or ""
        if not home.startswith("blu"):
            continue  # numpy's dtypes, typing helpers: documented where they come from
        if inspect.isclass(obj):
            classes.append(n)
        elif callable(obj):
            functions.append(n)
    return classes, functions


def _write_api() -> None:
    out = DOCS / "api"
    out.mkdir(exist_ok=True)
    pages = []
    # an object re-exported by several modules is indexed once: on the page of the module it is
    # defined under (the longest PUBLIC prefix of its __module__), else on the first page with it
    documented: dict[int, list[str]] = {}
    for name, _ in PUBLIC:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for n in sum(_public(mod), []):
            documented.setdefault(id(getattr(mod, n)), []).append(name)

    def index_page(obj) -> str:
        on = documented[id(obj)]
        home = getattr(obj, "__module__", "") or ""
        homes = [m for m in on if home == m or home.startswith(m + ".")]
        return max(homes, key=len) if homes else on[0]

    for name, title in PUBLIC:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue  # a module not merged yet
        classes, functions = _public(mod)
        lines = [f"# `{name}`: {title}", "", "```{eval-rst}", f".. automodule:: {name}", "```", ""]
        def again(n: str) -> str:
            return "" if index_page(getattr(mod, n)) == name else "   :no-index:\n"

        if classes:
            lines += ["## Classes", "", "```{eval-rst}"]
            lines += [f".. autoclass:: {name}.{c}\n   :members:\n{again(c)}" for c in classes]
            lines += ["```", ""]
        if functions:
            lines += ["## Functions", "", "```{eval-rst}"]
            lines += [f".. autofunction:: {name}.{f}\n{again(f)}" for f in functions]
            lines += ["```", ""]
        if name == "blu":
            lines += [
                "## Configuration",
                "",
                "`blu.config` holds the flags (see the "
                "[sharp bits](../tutorials/09_sharp_bits.md) for the environment "
                "variables).",
                "",
                "```{eval-rst}",
                ".. autoclass:: blu.core.config.Config\n   :members:\n",
                "```",
                "",
            ]
        page = name.replace(".", "_")
        text = "\n".join(lines)
        path = out / f"{page}.md"
        if not path.exists() or path.read_text() != text:  # unchanged pages stay cached
            path.write_text(text)
        pages.append(page)
    index = [
        "# API reference",
        "",
        "Generated from the public modules' docstrings.",
        "",
        "```{toctree}",
        ":maxdepth: 1",
        "",
        *pages,
        "```",
        "",
    ]
    text = "\n".join(index)
    if not (out / "index.md").exists() or (out / "index.md").read_text() != text:
        (out / "index.md").write_text(text)


_write_api()
