"""Write docs/jax_names.txt: JAX's public names per module, read from a real JAX install.

Run it with a Python that has JAX (not blu's environment; e.g. a temporary venv:
``python -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install jax``)::

    /tmp/jaxvenv/bin/python scripts/gen_jax_names.py

Each line is ``module name`` (``jax.numpy unique``). A name is public when it has no leading
underscore; names bound to third-party modules (``np`` and such) are left out, submodules of JAX
itself are kept. ``tests/core/test_jax_names.py`` reads the file and finds each name in blu or in
``docs/coming_from_jax.md``.
"""

from __future__ import annotations

import importlib
import pathlib
import types

MODULES = [
    "jax",
    "jax.numpy",
    "jax.lax",
    "jax.nn",
    "jax.nn.initializers",
    "jax.random",
    "jax.scipy.special",
    "jax.tree_util",
    "jax.sharding",
    "jax.debug",
]


def public_names(modname: str) -> list[str]:
    """The public names of one JAX module, sorted."""
    mod = importlib.import_module(modname)
    out = []
    for name in dir(mod):
        if name.startswith("_"):
            continue
        value = getattr(mod, name)
        if isinstance(value, types.ModuleType) and not value.__name__.startswith("jax"):
            continue
        out.append(name)
    return sorted(out)


def main() -> None:
    import jax

    path = pathlib.Path(__file__).resolve().parent.parent / "docs" / "jax_names.txt"
    lines = [f"# JAX {jax.__version__}'s public names, written by scripts/gen_jax_names.py"]
    for modname in MODULES:
        lines += [f"{modname} {name}" for name in public_names(modname)]
    path.write_text("\n".join(lines) + "\n")
    print(f"{path}: {len(lines) - 1} names")


if __name__ == "__main__":
    main()
