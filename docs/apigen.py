"""The API reference, written at build time from the public modules (``docs/conf.py`` calls
:func:`write_api`; ``docs/api/`` is git-ignored).

One page per public module (``PUBLIC``) and one for :class:`blu.Array` and its methods. Each page
opens with summary tables (``sphinx.ext.autosummary``: the name, linked to its entry, and the
first line of its docstring), grouped by topic on the large modules (``TOPICS``: the topic of the
submodule an object is defined in), then gives the full entries (autodoc). An object that several
modules export gets its entry once, on the page of the module it is defined under (the longest
``PUBLIC`` prefix of its ``__module__``, else the first page with it); the other pages' tables
link to that entry, except where they export a function under another name (``blu.tree.map``),
which has an entry of its own.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

PUBLIC = [
    ("blu", "Transforms, jit and the top-level API"),
    ("blu.numpy", "NumPy's API on blu arrays"),
    ("blu.numpy.linalg", "Linear algebra"),
    ("blu.numpy.fft", "Discrete Fourier transforms"),
    ("blu.lax", "Primitives (strict shapes and dtypes) and control flow"),
    ("blu.nn", "Neural-network functions"),
    ("blu.nn.initializers", "Parameter initializers"),
    ("blu.optim", "Optimizers, optax's gradient transformations and schedules"),
    ("blu.random", "Counter-based random numbers"),
    ("blu.tree_util", "Pytrees"),
    ("blu.tree", "Pytrees under jax.tree's short names"),
    ("blu.custom_batching", "Custom batching rules (jax.custom_batching)"),
    ("blu.scipy.special", "Special functions"),
    ("blu.scipy.linalg", "SciPy's linear algebra (jax.scipy.linalg)"),
    ("blu.scipy.signal", "SciPy's convolutions, detrending and spectra (jax.scipy.signal)"),
    ("blu.image", "Image resizing (jax.image)"),
    ("blu.scipy.fft", "Discrete cosine transforms (jax.scipy.fft)"),
    ("blu.scipy.integrate", "Numerical integration (jax.scipy.integrate)"),
    ("blu.scipy.ndimage", "Interpolation at coordinates (jax.scipy.ndimage)"),
    ("blu.debug", "Printing and callbacks inside jit"),
    ("blu.sharding", "Meshes and shardings"),
    ("blu.errors", "Errors"),
    ("blu.parallel", "Sharding, collectives and processes"),
    ("blu.cuda", "The GPU runtime"),
    ("blu.profiler", "Timeline traces"),
]

# the topic of each defining module, in the order topics are listed on a page
TOPICS = {
    # blu
    "blu.transforms.ad": "Differentiation",
    "blu.transforms.ad_api": "Differentiation",
    "blu.jacobians": "Differentiation",
    "blu.transforms.linear_transpose": "Differentiation",
    "blu.transforms.fwd_and_bwd": "Differentiation",
    "blu.transforms.custom_jvp": "Custom derivatives and rematerialization",
    "blu.transforms.custom_vjp": "Custom derivatives and rematerialization",
    "blu.transforms.custom_gradient": "Custom derivatives and rematerialization",
    "blu.transforms.closure_convert": "Custom derivatives and rematerialization",
    "blu.transforms.custom_batching": "Vectorization",
    "blu.transforms.remat": "Custom derivatives and rematerialization",
    "blu.transforms.batching": "Vectorization",
    "blu.transforms.jit": "Compilation and staging",
    "blu.core.staging": "Compilation and staging",
    "blu.core.interpreter": "Compilation and staging",
    "blu.core.jaxpr": "Compilation and staging",
    "blu.host": "Host transfers",
    "blu.core.array": "Arrays and abstract values",
    "blu.core.aval": "Arrays and abstract values",
    "blu.api": "Devices, processes and callbacks",
    "blu.parallel.devices": "Devices, processes and callbacks",
    "blu.parallel.device": "Devices, processes and callbacks",
    "blu.parallel.runtime": "Devices, processes and callbacks",
    "blu.parallel.mesh": "Meshes and sharding",
    "blu.parallel.sharded_array": "Meshes and sharding",
    "blu.parallel.shard_map": "Meshes and sharding",
    "blu.parallel.spmd": "Meshes and sharding",
    "blu.parallel.checkpoint": "Sharded checkpoints",
    "blu.environment": "Errors, configuration and environment",
    "blu.core.errors": "Errors, configuration and environment",
    # blu.numpy
    "blu.numpy.creation": "Array creation",
    "blu.numpy.building": "Array creation",
    "blu.numpy._promote": "Arrays, dtypes and promotion",
    "blu.numpy._dtypes": "Arrays, dtypes and promotion",
    "blu.numpy.ufuncs": "Elementwise arithmetic",
    "blu.numpy.ufunc_api": "Elementwise arithmetic",
    "blu.numpy.transcendental": "Exponentials, logarithms and trigonometry",
    "blu.numpy.complexes": "Complex numbers",
    "blu.numpy.logic": "Comparisons, logic and bits",
    "blu.numpy.manipulation": "Shape manipulation",
    "blu.numpy.padding": "Shape manipulation",
    "blu.numpy.repetition": "Shape manipulation",
    "blu.numpy.linalg.decompositions": "Decompositions",
    "blu.numpy.linalg.general": "Decompositions",
    "blu.numpy.linalg.solvers": "Solves, inverses and determinants",
    "blu.numpy.linalg.norms": "Norms",
    "blu.numpy.linalg.standard": "Products and einsum",
    "blu.numpy.linalg.tensor": "Products and einsum",
    # blu.scipy.special
    "blu.scipy.special": "Gamma, beta, error and information functions",
    "blu.scipy._dilog": "Gamma, beta, error and information functions",
    "blu.scipy._exp_integrals": "Integrals and series",
    "blu.scipy._fresnel_dawson": "Integrals and series",
    "blu.scipy._faddeeva": "Integrals and series",
    "blu.scipy._owens_t": "Integrals and series",
    "blu.scipy._hypergeometric": "Bessel, hypergeometric and spherical functions",
    "blu.scipy._bessel_jn": "Bessel, hypergeometric and spherical functions",
    "blu.scipy._sph_harm": "Bessel, hypergeometric and spherical functions",
    "blu.numpy.indexing": "Indexing, selection and updates",
    "blu.numpy.index_update": "Indexing, selection and updates",
    "blu.numpy.selection": "Indexing, selection and updates",
    "blu.numpy.editing": "Indexing, selection and updates",
    "blu.numpy.reductions": "Reductions",
    "blu.numpy.nanfuncs": "NaN-ignoring reductions and helpers",
    "blu.numpy.statistics": "Counting and statistics",
    "blu.numpy.products": "Products and einsum",
    "blu.numpy.einsum": "Products and einsum",
    "blu.numpy.sorting": "Sorting, searching and sets",
    "blu.numpy.sets": "Sorting, searching and sets",
    "blu.numpy.signal": "Convolution",
    "blu.numpy.extras": "More of NumPy's API",
    "blu.numpy.windows": "More of NumPy's API",
    "blu.numpy.differences": "More of NumPy's API",
    "blu.numpy.polynomial": "More of NumPy's API",
    "blu.numpy.index_tricks": "More of NumPy's API",
    "blu.numpy.index_grids": "More of NumPy's API",
    "blu.numpy.host_io": "More of NumPy's API",
    "blu.numpy.standard": "The Array API standard's names",
    "blu.numpy.devices": "Devices and interchange",
    # blu.lax
    "blu.lax.elementwise": "Elementwise operations",
    "blu.lax.special": "Elementwise operations",
    "blu.lax.bessel": "Elementwise operations",
    "blu.lax.zeta_series": "Elementwise operations",
    "blu.lax.incomplete": "Elementwise operations",
    "blu.lax.complex": "Elementwise operations",
    "blu.lax.casts": "Elementwise operations",
    "blu.lax.bits": "Bits and selection",
    "blu.lax.select_n": "Bits and selection",
    "blu.lax.shapes": "Shapes",
    "blu.lax.stacking": "Shapes",
    "blu.lax.slicing": "Slicing, gathers and scatters",
    "blu.lax.gather_scatter": "Slicing, gathers and scatters",
    "blu.lax.scatter_combine": "Slicing, gathers and scatters",
    "blu.lax.scatter_apply": "Slicing, gathers and scatters",
    "blu.lax.reductions": "Reductions and scans",
    "blu.lax.cumulative": "Reductions and scans",
    "blu.lax.associative_scan": "Reductions and scans",
    "blu.lax.custom_reduce": "Reductions and scans",
    "blu.lax.windowed": "Reductions and scans",
    "blu.lax.sorting": "Sorting",
    "blu.lax.dot": "Products and convolutions",
    "blu.lax.ragged": "Products and convolutions",
    "blu.lax.convolution": "Products and convolutions",
    "blu.lax.conv_shapes": "Products and convolutions",
    "blu.lax.conv_patches": "Products and convolutions",
    "blu.lax.conv_args": "Products and convolutions",
    "blu.lax.fft": "Products and convolutions",
    "blu.lax.attention": "Products and convolutions",
    "blu.lax.control_flow.conditionals": "Control flow",
    "blu.lax.control_flow.loops": "Control flow",
    "blu.lax.control_flow.scan": "Control flow",
    "blu.lax.control_flow.solves": "Control flow",
    "blu.lax.parallel": "Collectives",
    "blu.lax.ragged_collective": "Collectives",
    "blu.transforms.axes": "Collectives",
    "blu.transforms.ad_ops": "Gradients and scheduling",
    "blu.lax.random_gamma": "Gradients and scheduling",
    # blu.nn
    "blu.nn.layers": "Layers, normalization and losses",
    "blu.nn.losses": "Layers, normalization and losses",
    "blu.nn.softmax_family": "Layers, normalization and losses",
    "blu.nn.classifier": "Layers, normalization and losses",
    "blu.nn.normalization": "Layers, normalization and losses",
    "blu.nn.attention": "Attention",
    "blu.nn.activations": "Activations",
    "blu.nn.pooling": "Layers, normalization and losses",
    "blu.nn.log_means": "Activations",
    # blu.optim
    "blu.optim.optimizers": "Optimizers and schedules",
    "blu.optim.transforms": "Gradient transformations (optax's names)",
    "blu.optim.more_optimizers": "More optimizers (optax's)",
    "blu.optim.factorized": "More optimizers (optax's)",
    # blu.random
    "blu.random.prng": "Keys",
    "blu.random.samplers": "Samplers",
    "blu.random.distributions": "Distributions",
    "blu.random.more": "Distributions",
    "blu.random.derived": "Distributions",
    "blu.random.discrete": "Distributions",
    # blu.tree_util
    "blu.core.pytree": "Flattening and mapping",
    "blu.core.pytree_registry": "Registering types and key paths",
    "blu.tree_util": "Registering types and key paths",
}
GROUP_ABOVE = 24  # pages with more entries than this have their tables split by topic


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


def _summary(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:  # unchanged pages stay cached
        path.write_text(text)


# blu.Array's attributes that have no docstring and are not a blu.numpy function as a method
ARRAY_ATTRS = {
    "aval": "The abstract value: shape, dtype and weak type ({class}`blu.ShapedArray`).",
    "device": "The device that holds the array (the Array API's attribute).",
    "dtype": "The element type.",
    "imag": "The imaginary part (as {func}`blu.numpy.imag`).",
    "real": "The real part (as {func}`blu.numpy.real`).",
    "mT": "The transpose of the last two axes.",
    "nbytes": "The size of the elements in bytes.",
    "ndim": "The number of axes.",
    "shape": "The shape, a tuple of ints.",
    "size": "The number of elements.",
    "T": "The transpose (axes reversed).",
    "weak_type": "Whether the dtype is weak (from a Python scalar: it gives way in promotion).",
    "flatten": "The elements as a 1-d array (as {func}`blu.numpy.ravel`).",
    "is_deleted": "Whether {meth}`~blu.Array.delete` gave up the array.",
    "item": "The value of a one-element array as a Python scalar.",
    "to_device": "The array on another device (the Array API's method).",
    "tolist": "The values as nested Python lists.",
}


def _array_page() -> str:
    """blu.Array: a table of its properties and methods (those without a docstring are numpy's
    functions as methods: the table links to the function), then the class entry."""
    import blu
    import blu.numpy as bnp

    A = blu.Array
    names = sorted({n for k in A.__mro__[:-1] for n in vars(k) if not n.startswith("_")},
                   key=str.lower)  # fmt: skip
    props, methods = [], []
    for n in names:
        attr = inspect.getattr_static(A, n)
        is_prop = isinstance(attr, property) or not callable(attr)
        doc = _summary(getattr(A, n)) if not is_prop else _summary(attr)
        doc = doc or ARRAY_ATTRS.get(n, "")
        if not doc and callable(getattr(bnp, n, None)):
            doc = f"As {{func}}`blu.numpy.{n}`, with this array as its first argument."
        if not doc and n == "at":
            doc = (
                "Functional updates: `x.at[idx].set(v)`, `.add`, `.multiply`, `.min`, `.max`, "
                "`.get`."
            )
        row = f"| {{py:attr}}`~blu.Array.{n}` | {doc} |" if is_prop else \
            f"| {{py:meth}}`~blu.Array.{n}` | {doc} |"  # fmt: skip
        (props if is_prop else methods).append(row)
    lines = [
        "# `blu.Array`: arrays and their methods",
        "",
        "The array type of `blu.numpy` and of every transform's results. Arrays are immutable;",
        "`np.asarray(x)` converts to NumPy. The methods are `blu.numpy`'s functions with the array",
        "as first argument, as in NumPy and JAX.",
        "",
        "## Properties",
        "",
        "| Name | Summary |",
        "| --- | --- |",
        *props,
        "",
        "## Methods",
        "",
        "| Name | Summary |",
        "| --- | --- |",
        *methods,
        "",
        "## Reference",
        "",
        "```{eval-rst}",
        ".. autoclass:: blu.Array",
        "   :members:",
        "   :inherited-members:",
        "   :undoc-members:",
        "```",
        "",
    ]
    return "\n".join(lines)


def _modules() -> dict:
    mods = {}
    for name, _ in PUBLIC:
        try:
            mods[name] = importlib.import_module(name)
        except ImportError:
            continue  # a module not merged yet
    return mods


def _entries(mods: dict):
    """``entry(obj) -> (module, name)``: where ``obj``'s full entry is."""
    import blu

    on: dict[int, list[tuple[str, str]]] = {}
    for name, mod in mods.items():
        for n in sum(_public(mod), []):
            on.setdefault(id(getattr(mod, n)), []).append((name, n))
    on[id(blu.Array)] = [("blu", "Array")]

    def entry(obj) -> tuple[str, str]:
        places = on[id(obj)]
        home = getattr(obj, "__module__", "") or ""
        homes = [p for p in places if home == p[0] or home.startswith(p[0] + ".")]
        return max(homes, key=lambda p: len(p[0])) if homes else places[0]

    return entry, on


_CACHE: dict = {}


def reference_name(dotted: str) -> str | None:
    """The documented name (``blu.lax.scan``, ``blu.optim``) of the public object or module
    ``dotted`` names (``blu.scan`` is not one; ``blu.tree_util.tree_map`` is), else None."""
    if not _CACHE:
        _CACHE["mods"] = _modules()
        _CACHE["entries"] = _entries(_CACHE["mods"])
    mods = _CACHE["mods"]
    if dotted in mods:
        return dotted
    mod_name, _, attr = dotted.rpartition(".")
    if mod_name not in mods or not hasattr(mods[mod_name], attr):
        return None
    entry, on = _CACHE["entries"]
    obj = getattr(mods[mod_name], attr)
    if id(obj) not in on:
        return None
    m, n = entry(obj)
    if (m, attr) in on[id(obj)]:  # an alias documented under both names: keep this one
        n = attr
    return f"{m}.{n}"


def write_api(docs: Path) -> None:
    out = docs / "api"
    out.mkdir(exist_ok=True)
    import blu

    mods = _modules()
    entry, on = _entries(mods)

    pages = []
    for name, title in PUBLIC:
        if name not in mods:
            continue
        mod = mods[name]
        classes, functions = _public(mod)
        lines = [f"# `{name}`: {title}", "", "```{eval-rst}", f".. automodule:: {name}", "```", ""]

        def target(n: str) -> str:
            """the name the table links to: this page's entry, or the one elsewhere"""
            obj = getattr(mod, n)
            m, real = entry(obj)
            if (m, n) in on[id(obj)]:  # the entry's module has it under this name too
                real = n
            # a function under another name (blu.tree.map) has its entry here too
            here = m == name or (real != n and not inspect.isclass(obj))
            return f"{name}.{n}" if here else f"{m}.{real}"

        # the summary tables
        everything = classes + functions
        groups: dict[str, list[str]] = {}
        if len(everything) > GROUP_ABOVE:
            for n in sorted(everything, key=str.lower):
                home = getattr(getattr(mod, n), "__module__", "")
                groups.setdefault(TOPICS.get(home, "Other"), []).append(n)
            order = list(dict.fromkeys(TOPICS.values())) + ["Other"]
            groups = {t: groups[t] for t in order if t in groups}
        if len(everything) <= GROUP_ABOVE or list(groups) == ["Other"]:
            groups = {}
            if classes:
                groups["Classes"] = classes
            if functions:
                groups["Functions"] = functions
        lines += ["## Summary", ""]
        for topic, ns in groups.items():
            lines += [f"### {topic}", "", "```{eval-rst}", ".. autosummary::"]
            lines += ["   :nosignatures:", ""]
            for n in ns:
                t = target(n)
                if t == f"{name}.{n}":
                    lines.append(f"   {n}")  # automodule made this the current module
                else:  # an entry elsewhere; under another name there, that name shows
                    if t.startswith(name + "."):  # autosummary reads names in the module
                        t = t[len(name) + 1 :]
                    lines.append(f"   ~{t}" if t.rsplit(".", 1)[-1] == n else f"   {t}")
            lines += ["```", ""]
        if name == "blu":
            lines += ["The {doc}`Array class and its methods <blu_Array>` have their own page.", ""]

        # the full entries
        def again(n: str) -> str:
            return "" if target(n) == f"{name}.{n}" else "   :no-index:\n"

        doc_classes = [c for c in classes if getattr(mod, c) is not blu.Array]
        if doc_classes:
            lines += ["## Classes", "", "```{eval-rst}"]
            lines += [f".. autoclass:: {name}.{c}\n   :members:\n{again(c)}" for c in doc_classes]
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
        _write(out / f"{page}.md", "\n".join(lines))
        pages.append(page)
        if name == "blu":
            _write(out / "blu_Array.md", _array_page())
            pages.append("blu_Array")
    index = [
        "# API reference",
        "",
        "Generated from the public modules' docstrings: one page per module, each opening with",
        "summary tables (grouped by topic on the large modules) that link to the full entries.",
        "",
        "```{toctree}",
        ":maxdepth: 1",
        "",
        *pages,
        "```",
        "",
    ]
    _write(out / "index.md", "\n".join(index))
