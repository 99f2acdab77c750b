"""OpInfo entries: mgrid, ogrid, r_, c_, ix_ (blu.numpy's index tricks); numpy's scalar
aliases (float_, int_, ...) listed as dtypes, host I/O and printing as no operations."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from ops.base import NOT_OPERATIONS, nonempty_shape, op, uniform

NOT_OPERATIONS.update(
    {
        "numpy.s_": "numpy's own index-expression builder (slices, no arrays)",
        "numpy.index_exp": "numpy's own index-expression builder (slices, no arrays)",
        "numpy.index_grids": "a submodule (its functions are re-exported and listed)",
        "numpy.host_io": "a submodule (its functions are re-exported and listed)",
        **{
            f"numpy.{n}": "host I/O or printing through numpy, no array computation "
            "(tested in test_numpy_host_io)"
            for n in (
                "load",
                "save",
                "savez",
                "frombuffer",
                "fromfile",
                "fromiter",
                "fromstring",
                "array_repr",
                "array_str",
                "get_printoptions",
                "set_printoptions",
                "printoptions",
            )
        },
        **{
            f"numpy.{n}": "a dtype (numpy's alias of a sized scalar type)"
            for n in (
                "float_",
                "double",
                "single",
                "int_",
                "uint",
                "complex_",
                "cdouble",
                "csingle",
            )
        },
    }
)

# ---- index tricks ------------------------------------------------------------------------------

for _n, _key in (("mgrid", (slice(0, 3), slice(0, 1, 4j))), ("ogrid", (slice(-2, 5, 2.5),))):
    op(
        f"numpy.{_n}",
        (lambda g, k: lambda: g[k])(getattr(bnp, _n), _key),
        (lambda g, k: lambda: g[k])(getattr(np, _n), _key),
        lambda rng: (),
        grad=False,
        skip={"vmap": "no array argument", "jit": "no array argument"},
    )


def _pair_1d(rng):
    n = nonempty_shape(rng, 1, 1)
    return uniform()(rng, n), uniform()(rng, n)


op("numpy.r_", lambda a, b: bnp.r_[a, 0:2, 1.5, b], lambda a, b: np.r_[a, 0:2, 1.5, b], _pair_1d)
op("numpy.c_", lambda a, b: bnp.c_[a, b, 0:1:1j * a.shape[0]],
   lambda a, b: np.c_[a, b, 0:1:1j * a.shape[0]], _pair_1d)  # fmt: skip
op(
    "numpy.ix_",
    bnp.ix_,
    np.ix_,
    lambda rng: (rng.integers(0, 5, 3).astype(np.int32), rng.integers(0, 5, 2).astype(np.int32)),
    grad=False,
)
