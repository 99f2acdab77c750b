"""The OpInfo table: one entry per public operation of blu, driving the generic tests of
``tests/transforms/test_opinfo.py`` (value, derivatives, vmap, jit, keywords) and the coverage test.

Each ``OpInfo`` has the blu function, a float64 numpy/scipy reference, a sample generator (random
shapes with size-0/1 dims and broadcasting), special points (zeros, ties, +-inf, NaN, degenerate
matrices, repeated and out-of-range indices) and keyword variants. ``skip`` marks a known
exception of one generic test with its reason. The names an entry covers are its ``covers``
(``numpy.sin``, ``prim:sin``, ...); ``NOT_OPERATIONS`` lists the public names that are not
operations (dtypes, constants, submodules, helpers) with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import blu.nn as bnn
import blu.numpy as bnp
from blu import lax

Sampler = Callable[[np.random.Generator], tuple]


@dataclasses.dataclass
class OpInfo:
    name: str
    fn: Callable[..., Any]
    ref: Callable[..., Any] | None
    sample: Sampler
    covers: tuple[str, ...] = ()
    special: Sequence[tuple] = ()
    grad: bool = True  # differentiable in its float arguments
    diff_args: tuple[int, ...] | None = None  # which args to differentiate (default: float ones)
    kwargs: Sequence[dict] = ()  # keyword variants, each must change the result
    skip: dict[str, str] = dataclasses.field(default_factory=dict)  # test -> reason
    finite_grad_at_special: bool = False  # gradients at the special points must be finite
    n_ops: int = 1  # operations in the computation (scales the float tolerance)


TABLE: list[OpInfo] = []


def op(name: str, fn, ref, sample, covers: Sequence[str] = (), **kw) -> OpInfo:
    info = OpInfo(name, fn, ref, sample, tuple(covers) or (name,), **kw)
    TABLE.append(info)
    return info


# ---- samplers ----------------------------------------------------------------------------------


def rand_shape(rng: np.random.Generator, min_dims=0, max_dims=3, max_side=4) -> tuple[int, ...]:
    """A random shape; a side is 0 with probability 1/8 and 1 with probability 1/4."""
    nd = int(rng.integers(min_dims, max_dims + 1))
    sides = []
    for _ in range(nd):
        r = rng.random()
        sides.append(0 if r < 0.125 else 1 if r < 0.375 else int(rng.integers(2, max_side + 1)))
    return tuple(sides)


def nonempty_shape(rng, min_dims=1, max_dims=3, max_side=4):
    return tuple(max(s, 1) for s in rand_shape(rng, min_dims, max_dims, max_side))


def broadcast_pair(rng) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast: the second drops leading dims or has size-1 dims."""
    a = rand_shape(rng)
    b = list(a[int(rng.integers(0, len(a) + 1)) :])
    for i in range(len(b)):
        if rng.random() < 0.3:
            b[i] = 1
    return (a, tuple(b)) if rng.random() < 0.5 else (tuple(b), a)


def uniform(lo=-2.0, hi=2.0):
    def s(rng, shape):
        return rng.uniform(lo, hi, shape)

    return s


def away(lo, hi, avoid=0.0, gap=0.2):
    """Uniform in [lo, hi] but at least ``gap`` from ``avoid`` (kinks, poles)."""

    def s(rng, shape):
        x = rng.uniform(lo, hi, shape)
        return np.where(np.abs(x - avoid) < gap, avoid + gap * np.sign(x - avoid + 1e-300), x)

    return s


def unary_sampler(vals=None) -> Sampler:
    vals = vals or uniform()
    return lambda rng: (vals(rng, rand_shape(rng)),)


def binary_sampler(vx=None, vy=None) -> Sampler:
    vx, vy = vx or uniform(), vy or uniform()

    def s(rng):
        a, b = broadcast_pair(rng)
        return vx(rng, a), vy(rng, b)

    return s


def axis_sampler(vals=None, nonempty=True) -> Sampler:
    """An array and an axis (or None)."""
    vals = vals or uniform()

    def s(rng):
        shape = nonempty_shape(rng) if nonempty else rand_shape(rng, 1)
        axis = None if rng.random() < 0.3 else int(rng.integers(-len(shape), len(shape)))
        return vals(rng, shape), axis

    return s


def matrix_sampler(n_lo=1, n_hi=4, spd=False, batch=True) -> Sampler:
    def s(rng):
        n = int(rng.integers(n_lo, n_hi + 1))
        b = rand_shape(rng, 0, 1, 2) if batch else ()
        b = tuple(max(d, 1) for d in b)
        a = rng.standard_normal(b + (n, n))
        if spd:
            a = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
        else:
            a = a + 2 * np.eye(n)
        return (a,)

    return s


def ints(rng, shape, lo=-8, hi=8, dtype=np.int32):
    return rng.integers(lo, hi, shape).astype(dtype)


# ---- names that are not operations --------------------------------------------------------------

_DTYPES = (
    "bfloat16 bool bool_ float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 "
    "uint64 floating generic inexact integer number signedinteger unsignedinteger dtype "
    "ndarray"
).split()
NOT_OPERATIONS: dict[str, str] = {
    **{f"numpy.{n}": "a dtype or dtype class" for n in _DTYPES},
    **{f"numpy.{n}": "a constant" for n in ("e", "euler_gamma", "inf", "nan", "pi", "newaxis")},
    "nn.BATCH_NORM_STATISTICS": "a constant (the checkpoint names of batch norm's statistics)",
    "nn.POOL_OFFSETS": "a constant (the checkpoint name of max pooling's window offsets)",
    **{
        f"numpy.{n}": "a submodule (its functions are re-exported and listed)"
        for n in (
            "creation",
            "indexing",
            "index_update",
            "linalg",
            "logic",
            "manipulation",
            "repetition",
            "products",
            "reductions",
            "selection",
            "sorting",
            "ufuncs",
            "transcendental",
            "einsum",
        )
    },
    **{
        f"numpy.{n}": "dtype/shape query, no array computation (tested in test_numpy_promotion)"
        for n in (
            "finfo",
            "iinfo",
            "issubdtype",
            "can_cast",
            "promote_types",
            "result_type",
            "promote_args",
            "asarray_operand",
            "shape",
            "ndim",
            "size",
            "broadcast_shapes",
        )
    },
    **{
        f"linalg.{n}": "a result type or exception"
        for n in (
            "EigResult",
            "EighResult",
            "LinAlgError",
            "QRResult",
            "SVDResult",
            "SlogdetResult",
        )  # fmt: skip
    },
    **{
        f"lax.{n}": "a submodule"
        for n in (
            "bits",
            "casts",
            "control_flow",
            "cumulative",
            "elementwise",
            "gather_scatter",
            "linalg",
            "reductions",
            "shapes",
            "slicing",
            "sorting",
            "special",
            "attention",
            "attention_decomp",
            "attention_numpy",
            "convolution",
            "conv_args",
            "conv_decomp",
            "conv_numpy",
            "conv_shapes",
            "conv_patches",
            "windowed",
            "window_select",
            "parallel",
            "collective_prims",
            "random_gamma",
            "random_gamma_numpy",
            "bessel",
            "zeta_series",
            "incomplete",
            "collective_groups",
            "scatter_combine",
            "ragged",
            "ragged_collective",
            "custom_reduce",
            "custom_window",
        )
    },
    "numpy.signal": "a submodule (its functions are re-exported and listed)",
    "lax.ConvDimensionNumbers": "a named tuple of layouts for the conv functions",
    "lax.conv_dimension_numbers": "layout normalization, no array computation (the conv entries "
    "use string and None layouts; test_convolution)",
    "lax.padtype_to_pads": "padding arithmetic on shapes, no array computation (the conv entries "
    "use SAME/VALID; test_convolution)",
    **{
        f"lax.{n}": "shape arithmetic, no array computation (tests/lax/test_convolution.py: "
        "against closed forms and the convolutions' shapes)"
        for n in (
            "conv_general_permutations",
            "conv_general_shape_tuple",
            "conv_shape_tuple",
            "conv_transpose_shape_tuple",
        )
    },
    "lax.ConvGeneralDilatedDimensionNumbers": "a type alias (what dimension_numbers may be)",
    "lax.RoundingMethod": "an enum for lax.round",
    "lax.reduce_window_shape_tuple": "shape arithmetic, no array computation "
    "(tests/lax/test_reduce_window.py: against the loop's shapes)",
    "lax.Precision": "an enum for the precision of products (dot_general's precision=)",
    "numpy.extras": "a submodule (its functions are re-exported and listed)",
    "numpy.index_tricks": "a submodule (its functions are re-exported and listed)",
    "numpy.editing": "a submodule (its functions are re-exported and listed)",
    "numpy.nanfuncs": "a submodule (its functions are re-exported and listed)",
    "numpy.padding": "a submodule (its functions are re-exported and listed)",
    "numpy.windows": "a submodule (its functions are re-exported and listed)",
    "numpy.polynomial": "a submodule (its functions are re-exported and listed)",
    "numpy.differences": "a submodule (its functions are re-exported and listed)",
    "numpy.building": "a submodule (its functions are re-exported and listed)",
    "numpy.isscalar": "a type query, no array computation (tests/numpy/test_numpy_building.py)",
    "numpy.iterable": "a type query, no array computation (tests/numpy/test_numpy_building.py)",
    "numpy.einsum_path": "contraction-order planning from shapes, no array computation "
    "(tests/numpy/test_einsum_optimize.py)",
    "numpy.statistics": "a submodule (its functions are re-exported and listed)",
    "lax.callback": "a submodule (pure_callback is re-exported at the top level and listed)",
    "lax.incomplete_beta": "a submodule (betainc is re-exported and listed)",
    "prim:debug_callback": "a side effect with no output: tests/core/test_jax_toplevel.py checks "
    "each call's values under jit, grad and vmap",
    "numpy.IndexUpdateHelper": "x.at: covered by the IndexUpdateRef entries",
    "numpy.ufunc_api": "a submodule (its ufunc objects are re-exported and listed)",
    "numpy.ufunc_methods": "a submodule: the ufuncs' reduce/accumulate/at/reduceat, covered "
    "by tests/numpy/test_numpy_ufunc_methods.py and test_numpy_ufunc_reduce_edges.py",
    "numpy.ufunc": "the class of bnp.add, bnp.sin...: calls are the functions' entries; the "
    "methods against numpy's (tests/numpy/test_numpy_ufunc_methods.py)",
    "numpy.frompyfunc": "makes a ufunc of a Python function, no array computation of its own "
    "(tests/numpy/test_numpy_ufunc_methods.py: against a Python loop)",
    "prim:cpu_concat": "made only by the CPU plan from sums of zero-padded parts, after "
    "differentiation (test_cpu_concat)",
    "prim:inspect_sharding": "a side effect with no output, bound only while jit partitions a "
    "function over a mesh and consumed there: tests/parallel/test_parallel_debug_sharding.py "
    "checks the layouts it reports",
    "prim:sharding_constraint": "bound only while jit partitions a function over a mesh, and "
    "consumed there (blu.parallel.spmd): tests/parallel/test_parallel_spmd.py checks the layout "
    "it sets and its no-op outside",
    "prim:dot_bias_gelu": "made only by the CUDA plan from a product, its bias and the tanh GELU, "
    "after differentiation (test_gpu_epilogues: against float64 and the unfused program)",
    "prim:dot_dgelu": "made only by the CUDA plan from a backward product times the GELU's "
    "derivative (test_gpu_epilogues: against float64 and the unfused program)",
    "prim:dot_bias": "made only by the CUDA plan from a product plus a bias no kernel reads "
    "(test_gpu_epilogues: against float64 and the unfused program)",
    "prim:dot_acc": "made only by the CUDA plan from a product plus a value of its shape "
    "(test_gpu_epilogues: against float64; test_gpu_transformer_step: models against the CPU)",
    "prim:dot_product_attention_fwd_packed": "made only by the CUDA plan from attention on "
    "slices of one array (test_packed_attention: against float64 and the unpacked program)",
    "prim:dot_product_attention_bwd_packed": "made only by the CUDA plan from the attention "
    "backward and the reassembly of dq, dk, dv (test_packed_attention)",
}


def public_names() -> set[str]:
    """Every public name of blu.numpy, blu.numpy.linalg, blu.numpy.fft, blu.nn and blu.lax, and
    every primitive of docs/primitives.md (``prim:NAME``)."""
    import pathlib
    import re

    names = set()
    mods = (("numpy", bnp), ("linalg", bnp.linalg), ("fft", bnp.fft), ("nn", bnn), ("lax", lax))
    for prefix, mod in mods:
        pub = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        names |= {
            f"{prefix}.{n}"
            for n in pub
            if not isinstance(getattr(mod, n), type(math)) or f"{prefix}.{n}" in NOT_OPERATIONS
        }
        names |= {f"{prefix}.{n}" for n in pub if isinstance(getattr(mod, n), type(math))}
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "primitives.md"
    names |= {f"prim:{m}" for m in re.findall(r"^\| `([a-z_0-9]+)` \|", doc.read_text(), re.M)}
    return names


def covered() -> set[str]:
    out = set(NOT_OPERATIONS)
    for e in TABLE:
        out |= set(e.covers) | {e.name}
    return out
