"""OpInfo entries: mgrid, ogrid, r_, c_, ix_ (blu.numpy's index tricks); lax.stack, unstack,
tile, broadcast_like, empty; numpy's scalar aliases (float_, int_, ...) listed as dtypes, host
I/O and printing as no operations."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from blu import lax
from ops.base import NOT_OPERATIONS, nonempty_shape, op, rand_shape, unary_sampler, uniform

NOT_OPERATIONS.update(
    {
        "numpy.s_": "numpy's own index-expression builder (slices, no arrays)",
        "numpy.index_exp": "numpy's own index-expression builder (slices, no arrays)",
        "numpy.index_grids": "a submodule (its functions are re-exported and listed)",
        "numpy.host_io": "a submodule (its functions are re-exported and listed)",
        "lax.stacking": "a submodule",
        "lax.broadcast_shapes": "shape query, no array computation (tested in "
        "test_lax_shape_helpers)",
        "lax.dtype": "dtype query, no array computation (tested in test_lax_shape_helpers)",
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
# an integer range (a linspace slice, 0:1:nj, is float32 and would promote half inputs)
op("numpy.c_", lambda a, b: bnp.c_[a, b, 0 : a.shape[0]],
   lambda a, b: np.c_[a, b, 0 : a.shape[0]], _pair_1d)  # fmt: skip
op(
    "numpy.ix_",
    bnp.ix_,
    np.ix_,
    lambda rng: (rng.integers(0, 5, 3).astype(np.int32), rng.integers(0, 5, 2).astype(np.int32)),
    grad=False,
)


# ---- lax's stack, unstack, tile, broadcast_like, empty -----------------------------------------


def _stack_sample(rng):
    shape = rand_shape(rng, 0, 2)
    return (
        uniform()(rng, shape),
        uniform()(rng, shape),
        int(rng.integers(-len(shape) - 1, len(shape) + 1)),
    )


op("lax.stack", lambda a, b, ax: lax.stack([a, b], ax), lambda a, b, ax: np.stack([a, b], ax),
   _stack_sample)  # fmt: skip


def _unstack_sample(rng):
    shape = rand_shape(rng, 1, 3)
    return uniform()(rng, shape), int(rng.integers(-len(shape), len(shape)))


op("lax.unstack", lax.unstack,
   lambda x, ax: tuple(np.moveaxis(x, ax, 0)), _unstack_sample)  # fmt: skip
op(
    "lax.tile",
    lambda x: lax.tile(x, (2, 1, 3)[: x.ndim]),
    lambda x: np.tile(x, (2, 1, 3)[: x.ndim]),
    unary_sampler(),
)
op(
    "lax.broadcast_like",
    lambda x: lax.broadcast_like(x, np.zeros((2,) + x.shape, np.int8)),
    lambda x: np.broadcast_to(x, (2,) + x.shape),
    unary_sampler(),
)
op(
    "lax.empty",
    lambda: lax.empty((2, 0, 3), np.float32) * 0 + lax.empty((2, 1, 3), np.float32) * 0,
    lambda: np.zeros((2, 0, 3), np.float32),
    lambda rng: (),
    grad=False,
    skip={"vmap": "no array argument", "jit": "no array argument"},
)
