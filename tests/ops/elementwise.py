"""OpInfo entries: blu.numpy's elementwise functions (ufuncs, comparisons, bitwise)."""

from __future__ import annotations

import dataclasses  # noqa: F401
import math  # noqa: F401
from collections.abc import Callable, Sequence  # noqa: F401
from typing import Any  # noqa: F401

import numpy as np

import blu.numpy as bnp
from ops.base import (
    TABLE,
    away,
    binary_sampler,
    broadcast_pair,
    ints,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

# ---- float64 references -----------------------------------------------------------------------

_U = {  # numpy name -> (reference, sampler of values, special points)
    "abs": (np.abs, away(-2, 2), [0.0, -0.0, np.inf, -np.inf]),
    "absolute": (np.abs, away(-2, 2), [0.0]),
    "fabs": (np.fabs, away(-2, 2), [0.0]),
    "negative": (np.negative, uniform(), [0.0, np.inf]),
    "positive": (np.positive, uniform(), [0.0]),
    "sin": (np.sin, uniform(), [0.0, np.pi]),
    "cos": (np.cos, uniform(), [0.0, np.pi]),
    "tan": (np.tan, uniform(-1.2, 1.2), [0.0]),
    "arcsin": (np.arcsin, uniform(-0.9, 0.9), [0.0]),
    "arccos": (np.arccos, uniform(-0.9, 0.9), [0.0]),
    "arctan": (np.arctan, uniform(), [0.0, np.inf]),
    "sinh": (np.sinh, uniform(), [0.0]),
    "cosh": (np.cosh, uniform(), [0.0]),
    "tanh": (np.tanh, uniform(), [0.0, np.inf, -np.inf, 30.0]),
    "arcsinh": (np.arcsinh, uniform(), [0.0]),
    "arccosh": (np.arccosh, uniform(1.2, 3), [1.5]),
    "arctanh": (np.arctanh, uniform(-0.9, 0.9), [0.0]),
    "exp": (np.exp, uniform(), [0.0, -np.inf, 800.0]),
    "exp2": (np.exp2, uniform(), [0.0, -np.inf]),
    "expm1": (np.expm1, uniform(), [0.0, 1e-10]),
    "log": (np.log, uniform(0.1, 3), [1.0, np.inf]),
    "log10": (np.log10, uniform(0.1, 3), [1.0]),
    "log2": (np.log2, uniform(0.1, 3), [1.0]),
    "log1p": (np.log1p, uniform(-0.9, 2), [0.0, 1e-10]),
    "sqrt": (np.sqrt, uniform(0.1, 3), [1.0, np.inf]),
    "cbrt": (np.cbrt, away(-3, 3), [1.0, -8.0]),
    "square": (np.square, uniform(), [0.0]),
    "reciprocal": (np.reciprocal, away(-2, 2, gap=0.3), [1.0, np.inf]),
    "sign": (np.sign, away(-2, 2), [0.0, -0.0, np.inf]),
    "ceil": (np.ceil, away(-2, 2), [0.5, -0.5]),
    "floor": (np.floor, away(-2, 2), [0.5, -0.5]),
    "trunc": (np.trunc, away(-2, 2), [0.5, -0.5]),
    "fix": (np.fix, away(-2, 2), [0.5, -0.5]),
    "rint": (np.rint, away(-2, 2), [0.5, 1.5, 2.5, -0.5]),
    "round": (np.round, away(-2, 2), [0.5, 1.5, 2.5, -0.5]),
    "around": (np.around, away(-2, 2), [0.5, 1.5]),
    "deg2rad": (np.deg2rad, uniform(), [0.0]),
    "rad2deg": (np.rad2deg, uniform(), [0.0]),
    "degrees": (np.degrees, uniform(), [0.0]),
    "radians": (np.radians, uniform(), [0.0]),
    "conj": (np.conj, uniform(), [0.0]),
    "conjugate": (np.conjugate, uniform(), [0.0]),
    "real": (np.real, uniform(), [0.0]),
    "copy": (np.copy, uniform(), [0.0, np.nan]),
    "nan_to_num": (np.nan_to_num, uniform(), [np.nan, np.inf, -np.inf]),
    "ravel": (np.ravel, uniform(), [0.0]),
    "signbit": (np.signbit, uniform(), [0.0, -0.0, -np.inf]),
    "isfinite": (np.isfinite, uniform(), [np.inf, np.nan]),
    "isinf": (np.isinf, uniform(), [np.inf, -np.inf, np.nan]),
    "isnan": (np.isnan, uniform(), [np.nan, np.inf]),
    "logical_not": (np.logical_not, uniform(), [0.0]),
}
_NONDIFF = {
    "sign",
    "ceil",
    "floor",
    "trunc",
    "fix",
    "rint",
    "round",
    "around",
    "signbit",
    "isfinite",
    "isinf",
    "isnan",
    "logical_not",
}

for _n, (_ref, _vals, _sp) in _U.items():
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        _ref,
        unary_sampler(_vals),
        special=[(np.array(_sp, np.float64),)],
        grad=_n not in _NONDIFF,
    )

_B = {  # name -> (reference, x values, y values, special points (x, y))
    "add": (np.add, uniform(), uniform(), [(np.inf, -np.inf)]),
    "subtract": (np.subtract, uniform(), uniform(), [(np.inf, np.inf)]),
    "multiply": (np.multiply, uniform(), uniform(), [(0.0, np.inf), (0.0, 0.0)]),
    "divide": (np.divide, uniform(), away(-2, 2, gap=0.3), [(1.0, 0.0), (0.0, 0.0)]),
    "true_divide": (np.true_divide, uniform(), away(-2, 2, gap=0.3), [(1.0, 0.0)]),
    "power": (np.power, uniform(0.2, 2), uniform(), [(0.0, 2.0), (0.0, 0.0), (2.0, 0.0)]),
    "float_power": (np.float_power, uniform(0.2, 2), uniform(), [(0.0, 2.0)]),
    "arctan2": (np.arctan2, uniform(), away(-2, 2), [(0.0, 1.0), (1.0, 0.0)]),
    "hypot": (np.hypot, away(-2, 2), away(-2, 2), [(3.0, 4.0)]),
    "maximum": (np.maximum, uniform(), uniform(), [(1.0, 1.0), (np.nan, 1.0)]),
    "minimum": (np.minimum, uniform(), uniform(), [(1.0, 1.0), (np.nan, 1.0)]),
    "fmax": (np.fmax, uniform(), uniform(), [(np.nan, 1.0)]),
    "fmin": (np.fmin, uniform(), uniform(), [(np.nan, 1.0)]),
    "logaddexp": (np.logaddexp, uniform(), uniform(), [(-np.inf, -np.inf), (1.0, 1.0)]),
    "logaddexp2": (np.logaddexp2, uniform(), uniform(), [(-np.inf, 0.0)]),
    "copysign": (np.copysign, away(-2, 2), away(-2, 2), [(1.0, -0.0)]),
    "mod": (np.mod, uniform(), away(0.5, 2, gap=0.1), [(-1.0, 3.0), (3.0, 3.0)]),
    "remainder": (np.remainder, uniform(), away(0.5, 2, gap=0.1), [(-1.0, 3.0)]),
    "fmod": (np.fmod, uniform(), away(0.5, 2, gap=0.1), [(-1.0, 3.0)]),
    "floor_divide": (np.floor_divide, uniform(), away(0.5, 2, gap=0.1), [(-1.0, 3.0)]),
    "equal": (np.equal, uniform(), uniform(), [(1.0, 1.0), (np.nan, np.nan)]),
    "not_equal": (np.not_equal, uniform(), uniform(), [(np.nan, np.nan)]),
    "less": (np.less, uniform(), uniform(), [(1.0, 1.0)]),
    "less_equal": (np.less_equal, uniform(), uniform(), [(1.0, 1.0)]),
    "greater": (np.greater, uniform(), uniform(), [(1.0, 1.0)]),
    "greater_equal": (np.greater_equal, uniform(), uniform(), [(1.0, 1.0)]),
    "logical_and": (np.logical_and, uniform(), uniform(), [(0.0, 1.0)]),
    "logical_or": (np.logical_or, uniform(), uniform(), [(0.0, 0.0)]),
    "logical_xor": (np.logical_xor, uniform(), uniform(), [(1.0, 1.0)]),
    "isclose": (np.isclose, uniform(), uniform(), [(1.0, 1.0 + 1e-9)]),
}
_B_NONDIFF = {
    "mod",
    "remainder",
    "fmod",
    "floor_divide",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "isclose",
    "copysign",
}
for _n, (_ref, _vx, _vy, _sp) in _B.items():
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        _ref,
        binary_sampler(_vx, _vy),
        special=[(np.array([p[0] for p in _sp]), np.array([p[1] for p in _sp]))],
        grad=_n not in _B_NONDIFF,
    )
# mod/fmod/remainder are differentiable in x (slope 1) but have jumps; grad checked on x only
for _n in ("mod", "remainder", "fmod"):
    TABLE[[e.name for e in TABLE].index(f"numpy.{_n}")].skip["grad"] = (
        "piecewise: jumps where x/y is an integer make finite differences unreliable"
    )

op(
    "numpy.divmod",
    lambda x, y: bnp.divmod(x, y),
    np.divmod,
    binary_sampler(uniform(), away(0.5, 2)),
    grad=False,
)
op(
    "numpy.allclose",
    bnp.allclose,
    np.allclose,
    binary_sampler(),
    grad=False,
    skip={"vmap": "returns a Python-style scalar bool over all elements"},
)
op(
    "numpy.array_equal",
    bnp.array_equal,
    np.array_equal,
    binary_sampler(),
    grad=False,
    skip={"vmap": "shape comparison is static"},
)

_INT_B = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}
for _n, _ref in _INT_B.items():
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        _ref,
        lambda rng: tuple(ints(rng, s) for s in broadcast_pair(rng)),
        grad=False,
    )
op(
    "numpy.left_shift",
    bnp.left_shift,
    np.left_shift,
    lambda rng: (ints(rng, (5,)), ints(rng, (5,), 0, 8)),
    grad=False,
)
op(
    "numpy.right_shift",
    bnp.right_shift,
    np.right_shift,
    lambda rng: (ints(rng, (5,)), ints(rng, (5,), 0, 8)),
    grad=False,
)
for _n in ("bitwise_not", "invert"):
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        np.invert,
        lambda rng: (ints(rng, rand_shape(rng)),),
        grad=False,
    )
