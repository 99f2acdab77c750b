"""The OpInfo table: one entry per public operation of blu, driving the generic tests of
``tests/test_opinfo.py`` (value, derivatives, vmap, jit, keywords) and the coverage test.

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
import scipy.linalg
import scipy.special

import blu
import blu.nn as bnn
import blu.numpy as bnp
from blu import lax
from blu.lax import linalg as lax_linalg

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


def unary_sampler(vals=uniform()) -> Sampler:
    return lambda rng: (vals(rng, rand_shape(rng)),)


def binary_sampler(vx=uniform(), vy=uniform()) -> Sampler:
    def s(rng):
        a, b = broadcast_pair(rng)
        return vx(rng, a), vy(rng, b)

    return s


def axis_sampler(vals=uniform(), nonempty=True) -> Sampler:
    """An array and an axis (or None)."""

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
_NONDIFF = {"sign", "ceil", "floor", "trunc", "fix", "rint", "round", "around", "signbit",
            "isfinite", "isinf", "isnan", "logical_not"}  # fmt: skip

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
_B_NONDIFF = {"mod", "remainder", "fmod", "floor_divide", "equal", "not_equal", "less",
              "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
              "logical_xor", "isclose", "copysign"}  # fmt: skip
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

op("numpy.divmod", lambda x, y: bnp.divmod(x, y), np.divmod, binary_sampler(uniform(), away(0.5, 2)), grad=False)  # fmt: skip
op("numpy.allclose", bnp.allclose, np.allclose, binary_sampler(), grad=False,
   skip={"vmap": "returns a Python-style scalar bool over all elements"})  # fmt: skip
op("numpy.array_equal", bnp.array_equal, np.array_equal, binary_sampler(), grad=False,
   skip={"vmap": "shape comparison is static"})  # fmt: skip

_INT_B = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
          "bitwise_xor": np.bitwise_xor}  # fmt: skip
for _n, _ref in _INT_B.items():
    op(f"numpy.{_n}", getattr(bnp, _n), _ref,
       lambda rng: tuple(ints(rng, s) for s in broadcast_pair(rng)), grad=False)  # fmt: skip
op("numpy.left_shift", bnp.left_shift, np.left_shift,
   lambda rng: (ints(rng, (5,)), ints(rng, (5,), 0, 8)), grad=False)  # fmt: skip
op("numpy.right_shift", bnp.right_shift, np.right_shift,
   lambda rng: (ints(rng, (5,)), ints(rng, (5,), 0, 8)), grad=False)  # fmt: skip
for _n in ("bitwise_not", "invert"):
    op(f"numpy.{_n}", getattr(bnp, _n), np.invert, lambda rng: (ints(rng, rand_shape(rng)),),
       grad=False)  # fmt: skip

# ---- reductions --------------------------------------------------------------------------------

_R = {  # name -> (reference, values, differentiable, special points)
    "sum": (np.sum, uniform(), True, [0.0, 0.0, np.inf]),
    "prod": (np.prod, uniform(), True, [0.0, 2.0, 3.0]),
    "product": (np.prod, uniform(), True, [0.0, 0.0, 3.0]),
    "mean": (np.mean, uniform(), True, [1.0, 2.0]),
    "max": (np.max, uniform(), True, [1.0, 1.0, 0.0]),
    "min": (np.min, uniform(), True, [1.0, 1.0, 2.0]),
    "amax": (np.amax, uniform(), True, [np.nan, 1.0]),
    "amin": (np.amin, uniform(), True, [-np.inf, 1.0]),
    "nanmax": (np.nanmax, uniform(), True, [np.nan, 1.0]),
    "nanmin": (np.nanmin, uniform(), True, [np.nan, 1.0]),
    "nansum": (np.nansum, uniform(), True, [np.nan, 1.0]),
    "nanmean": (np.nanmean, uniform(), True, [np.nan, 1.0]),
    "std": (np.std, uniform(), True, [1.0, 2.0, 4.0]),
    "var": (np.var, uniform(), True, [1.0, 1.0, 4.0]),
    "median": (np.median, uniform(), True, [1.0, 3.0, 2.0]),
    "ptp": (np.ptp, uniform(), True, [1.0, 3.0]),
    "average": (np.average, uniform(), True, [1.0, 2.0]),
    "all": (np.all, uniform(), False, [0.0, 1.0]),
    "any": (np.any, uniform(), False, [0.0, 0.0]),
    "argmax": (np.argmax, uniform(), False, [1.0, 1.0, 0.0]),
    "argmin": (np.argmin, uniform(), False, [1.0, 1.0, 2.0]),
    "count_nonzero": (np.count_nonzero, uniform(), False, [0.0, 1.0]),
}
for _n, (_ref, _vals, _d, _sp) in _R.items():
    op(
        f"numpy.{_n}",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        (lambda f: lambda x, axis: f(x, axis=axis))(_ref),
        axis_sampler(_vals),
        special=[(np.array(_sp), None), (np.array(_sp), 0)],
        grad=_d,
        n_ops=8,
    )
for _n, _ref in {"cumsum": np.cumsum, "cumprod": np.cumprod, "cumulative_sum": np.cumsum,
                 "cumulative_prod": np.cumprod}.items():  # fmt: skip
    op(
        f"numpy.{_n}",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        (lambda f: lambda x, axis: f(x, axis=0 if axis is None and x.ndim == 1 else axis))(_ref),
        lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 6)), 0),
        special=[(np.array([0.0, 0.0, 3.0, 2.0]), 0), (np.array([2.0, 0.0, 3.0]), 0)],
        n_ops=8,
    )
op("numpy.quantile", lambda x, q: bnp.quantile(x, q), lambda x, q: np.quantile(x, q),
   lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 6)), 0.3),
   diff_args=(0,), n_ops=8)  # fmt: skip
op("numpy.percentile", lambda x, q: bnp.percentile(x, q), lambda x, q: np.percentile(x, q),
   lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 6)), 30.0),
   diff_args=(0,), n_ops=8)  # fmt: skip
op("numpy.trace", bnp.trace, np.trace, lambda rng: (uniform()(rng, nonempty_shape(rng, 2, 3)),),
   kwargs=[{"offset": 1}])  # fmt: skip

# ---- shapes and manipulation -------------------------------------------------------------------


def _sh(rng, nd=2):
    return uniform()(rng, rand_shape(rng, nd, nd))


_M = {  # name -> (blu fn of x, numpy fn of x, min dims)
    "reshape": (lambda x: bnp.reshape(x, (-1,)), lambda x: np.reshape(x, (-1,)), 0),
    "transpose": (bnp.transpose, np.transpose, 0),
    "permute_dims": (lambda x: bnp.permute_dims(x, tuple(range(x.ndim))[::-1]), np.transpose, 2),
    "matrix_transpose": (bnp.matrix_transpose, lambda x: np.swapaxes(x, -1, -2), 2),
    "swapaxes": (lambda x: bnp.swapaxes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1), 1),
    "moveaxis": (lambda x: bnp.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1), 1),
    "expand_dims": (lambda x: bnp.expand_dims(x, 0), lambda x: np.expand_dims(x, 0), 0),
    "squeeze": (bnp.squeeze, np.squeeze, 0),
    "flip": (bnp.flip, np.flip, 1),
    "fliplr": (bnp.fliplr, np.fliplr, 2),
    "flipud": (bnp.flipud, np.flipud, 1),
    "roll": (lambda x: bnp.roll(x, 2, axis=0), lambda x: np.roll(x, 2, axis=0), 1),
    "tile": (lambda x: bnp.tile(x, (2, 1)), lambda x: np.tile(x, (2, 1)), 0),
    "repeat": (lambda x: bnp.repeat(x, 2, axis=0), lambda x: np.repeat(x, 2, axis=0), 1),
    "broadcast_to": (lambda x: bnp.broadcast_to(x, (2,) + x.shape),
                     lambda x: np.broadcast_to(x, (2,) + x.shape), 0),
    "atleast_1d": (bnp.atleast_1d, np.atleast_1d, 0),
    "atleast_2d": (bnp.atleast_2d, np.atleast_2d, 0),
    "atleast_3d": (bnp.atleast_3d, np.atleast_3d, 0),
    "diagonal": (bnp.diagonal, np.diagonal, 2),
    "diag": (bnp.diag, np.diag, 1),
    "tril": (bnp.tril, np.tril, 2),
    "triu": (bnp.triu, np.triu, 2),
    "pad": (lambda x: bnp.pad(x, 1), lambda x: np.pad(x, 1), 0),
    "split": (lambda x: bnp.split(x, 1), lambda x: np.split(x, 1), 1),
    "array_split": (lambda x: bnp.array_split(x, 2), lambda x: np.array_split(x, 2), 1),
    "hsplit": (lambda x: bnp.hsplit(x, 1), lambda x: np.hsplit(x, 1), 1),
    "vsplit": (lambda x: bnp.vsplit(x, 1), lambda x: np.vsplit(x, 1), 2),
    "astype": (lambda x: bnp.astype(x, bnp.float32), lambda x: x.astype(np.float32), 0),
    "asarray": (bnp.asarray, np.asarray, 0),
    "array": (bnp.array, np.array, 0),
    "zeros_like": (bnp.zeros_like, np.zeros_like, 0),
    "ones_like": (bnp.ones_like, np.ones_like, 0),
    "full_like": (lambda x: bnp.full_like(x, 3.0), lambda x: np.full_like(x, 3.0), 0),
    "empty_like": (lambda x: bnp.empty_like(x) * 0, lambda x: np.zeros_like(x), 0),
    "getitem": (lambda x: bnp.getitem(x, (Ellipsis, slice(None, None, -1))),
                lambda x: x[..., ::-1], 1),
}  # fmt: skip
_M_KW = {"diagonal": [{"offset": 1}], "tril": [{"k": -1}], "triu": [{"k": 1}], "diag": [{"k": 1}],
         "flip": [{"axis": 0}], "squeeze": [{"axis": ()}], "transpose": [{"axes": None}]}  # fmt: skip
_M_KW["squeeze"] = []
_M_KW["transpose"] = []
for _n, (_f, _ref, _nd) in _M.items():
    op(
        f"numpy.{_n}",
        _f,
        _ref,
        (lambda nd, hi: lambda rng: (uniform()(rng, nonempty_shape(rng, nd, hi)
                                               if nd else rand_shape(rng)),))(
            _nd, 1 if _n == "diag" else 2 if _n in ("tril", "triu") else max(_nd, 3)),
        kwargs=[{k: v} for d in _M_KW.get(_n, []) for k, v in d.items()],
        special=[(np.arange(6.0).reshape(2, 3),)] if _n != "diag" else [(np.arange(3.0),)],
        grad=_n not in ("zeros_like", "ones_like", "full_like", "empty_like"),
        skip={"grad": "float32 output: central differences in float32 are too coarse"}
        if _n == "astype" else {},
    )

_CAT = {
    "concatenate": (lambda a, b: bnp.concatenate([a, b]), lambda a, b: np.concatenate([a, b])),
    "concat": (lambda a, b: bnp.concat([a, b]), lambda a, b: np.concatenate([a, b])),
    "stack": (lambda a, b: bnp.stack([a, b]), lambda a, b: np.stack([a, b])),
    "hstack": (lambda a, b: bnp.hstack([a, b]), lambda a, b: np.hstack([a, b])),
    "vstack": (lambda a, b: bnp.vstack([a, b]), lambda a, b: np.vstack([a, b])),
    "dstack": (lambda a, b: bnp.dstack([a, b]), lambda a, b: np.dstack([a, b])),
    "column_stack": (lambda a, b: bnp.column_stack([a, b]), lambda a, b: np.column_stack([a, b])),
    "append": (bnp.append, np.append),
    "broadcast_arrays": (bnp.broadcast_arrays, np.broadcast_arrays),
}
for _n, (_f, _ref) in _CAT.items():
    op(f"numpy.{_n}", _f, _ref,
       lambda rng: (lambda s: (uniform()(rng, s), uniform()(rng, s)))(nonempty_shape(rng, 1, 2)))  # fmt: skip

# ---- products ----------------------------------------------------------------------------------


def _mm_sampler(rng):
    n, k, m = (int(rng.integers(0, 4)) for _ in range(3))
    b = nonempty_shape(rng, 0, 1, 2)
    return rng.standard_normal(b + (n, k)), rng.standard_normal((k, m))


def _vec_pair(rng):
    n = int(rng.integers(0, 5))
    return rng.standard_normal(n), rng.standard_normal(n)


_P = {
    "matmul": (bnp.matmul, np.matmul, _mm_sampler),
    "dot": (bnp.dot, np.dot, lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng))),
    "inner": (bnp.inner, np.inner, _vec_pair),
    "outer": (bnp.outer, np.outer, _vec_pair),
    "vdot": (bnp.vdot, np.vdot, _vec_pair),
    "vecdot": (bnp.vecdot, lambda a, b: np.sum(a * b, -1), _vec_pair),
    "tensordot": (lambda a, b: bnp.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1),
                  lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng))),
    "kron": (bnp.kron, np.kron, lambda rng: (rng.standard_normal((2, 2)), rng.standard_normal((1, 3)))),
    "einsum": (lambda a, b: bnp.einsum("...ij,jk->...ik", a, b),
               lambda a, b: np.einsum("...ij,jk->...ik", a, b), _mm_sampler),
}  # fmt: skip
for _n, (_f, _ref, _s) in _P.items():
    op(f"numpy.{_n}", _f, _ref, _s, n_ops=8)

# ---- selection, sorting, indexing ---------------------------------------------------------------


def _take_sampler(rng):
    x = uniform()(rng, nonempty_shape(rng, 1, 2))
    idx = rng.integers(-x.shape[0], x.shape[0], int(rng.integers(0, 5)))
    return x, idx


_OOB = (np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([0, 7, -1, -9, 0, 0]))  # repeated, out of range
op("numpy.take", lambda x, i, **kw: bnp.take(x, i, axis=0, **kw),
   lambda x, i, mode=None, fill_value=None: _np_take(x, i, mode, fill_value),
   _take_sampler, special=[_OOB],
   kwargs=[{"mode": "wrap"}, {"mode": "fill"}, {"mode": "fill", "fill_value": -1.0}])  # fmt: skip


def _np_take(x, i, mode, fill_value):
    n = x.shape[0]
    if mode == "wrap":
        return np.take(x, np.mod(i, n), axis=0)
    if mode == "fill":
        bad = (i < -n) | (i >= n)
        out = np.take(x, np.clip(np.where(i < 0, i + n, i), 0, n - 1), axis=0)
        fill = 0.0 if fill_value is None else fill_value
        return np.where(bad.reshape(bad.shape + (1,) * (x.ndim - 1)), fill, out)
    if mode in (None, "normalize"):
        i = np.where(i < 0, i + n, i)
    return np.take(x, np.clip(i, 0, n - 1), axis=0)


op("numpy.take_along_axis",
   lambda x, i, **kw: bnp.take_along_axis(x, i, axis=0, **kw),
   lambda x, i, mode=None, fill_value=None: _np_take(x, i, "fill" if mode == "fill" else
                                                     mode or "normalize", fill_value)
   if mode != "wrap" else np.take(x, np.mod(i, x.shape[0])),
   lambda rng: (lambda x: (x, rng.integers(-x.shape[0], x.shape[0], 4)))(
       uniform()(rng, (int(rng.integers(1, 5)),))),
   special=[_OOB],
   kwargs=[{"mode": "wrap"}, {"mode": "fill"}, {"mode": "fill", "fill_value": -1.0}])  # fmt: skip


def _at_get(x, i, **kw):
    return bnp.asarray(x).at[i].get(**kw)


def _np_at_get(x, i, mode=None, fill_value=None):
    if mode == "fill":
        return _np_take(x, i, "fill", np.nan if fill_value is None else fill_value)
    return _np_take(x, i, "normalize", None)


op("numpy.IndexUpdateRef.get", _at_get, _np_at_get, _take_sampler, special=[_OOB],
   kwargs=[{"mode": "fill"}, {"mode": "fill", "fill_value": -1.0}],
   covers=("numpy.IndexUpdateRef", "numpy.IndexUpdateHelper", "numpy.IndexUpdateRef.get"))  # fmt: skip


def _np_update(op_name):
    def ref(x, i, u, mode=None):
        x = np.array(x, np.float64)
        n = x.shape[0]
        i = np.where(i < 0, i + n, i)
        if mode == "clip":
            i = np.clip(i, 0, n - 1)
        keep = (i >= 0) & (i < n)
        i, u = i[keep], np.broadcast_to(u, keep.shape + x.shape[1:])[keep]
        if op_name == "set":
            x[i] = u  # numpy keeps the last of repeated indices, as blu
        else:
            getattr(np, {"add": "add", "multiply": "multiply", "min": "minimum",
                         "max": "maximum"}[op_name]).at(x, i, u)  # fmt: skip
        return x

    return ref


def _upd_sampler(rng):
    x = uniform()(rng, nonempty_shape(rng, 1, 2))
    i = rng.integers(-x.shape[0] - 2, x.shape[0] + 2, int(rng.integers(0, 6)))
    return x, i, uniform(0.5, 2)(rng, i.shape + x.shape[1:])


for _n in ("set", "add", "multiply", "min", "max"):
    op(f"numpy.IndexUpdateRef.{_n}",
       (lambda n: lambda x, i, u, **kw: getattr(bnp.asarray(x).at[i], n)(u, **kw))(_n),
       _np_update(_n), _upd_sampler, diff_args=(0, 2),
       special=[(np.array([1.0, 2.0, 3.0]), np.array([0, 0, 1, 5, -1]),
                 np.array([2.0, 3.0, 4.0, 5.0, 6.0])),
                (np.array([1.0, 2.0, 3.0]), np.array([0, 0, 5]), np.array([2.0, 3.0, 0.5])),
                (np.array([1.0, 2.0, 3.0]), np.array([0, 0, 5]), np.array([2.0, 3.0, 9.0]))],
       kwargs=[{"mode": "clip"}], finite_grad_at_special=True)  # fmt: skip
op("numpy.where", lambda c, x, y: bnp.where(c, x, y), np.where,
   lambda rng: (lambda s: (rng.random(s) < 0.5, uniform()(rng, s), uniform()(rng, s)))(
       rand_shape(rng)), diff_args=(1, 2))  # fmt: skip
op("numpy.clip", lambda x: bnp.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5),
   unary_sampler(away(-2, 2, 0.5, 0.1)), special=[(np.array([-0.5, 0.5, np.nan]),)])  # fmt: skip
op("numpy.sort", lambda x: bnp.sort(x, axis=-1), lambda x: np.sort(x, axis=-1),
   lambda rng: (uniform()(rng, rand_shape(rng, 1)),), special=[(np.array([1.0, 1.0, np.nan, -np.inf]),)])  # fmt: skip
op("numpy.argsort", lambda x: bnp.argsort(x, axis=-1), lambda x: np.argsort(x, axis=-1, kind="stable"),
   lambda rng: (uniform()(rng, rand_shape(rng, 1)),), grad=False, special=[(np.array([1.0, 1.0, 0.0, -np.inf]),)])  # fmt: skip
op("numpy.searchsorted", bnp.searchsorted, np.searchsorted,
   lambda rng: (np.sort(uniform()(rng, (5,))), uniform()(rng, (3,))), grad=False,
   kwargs=[{"side": "right"}], special=[(np.array([1.0, 2.0, 2.0, 3.0]), np.array([2.0, 0.0, 9.0]))])  # fmt: skip
op("numpy.nonzero", lambda x: bnp.nonzero(x, size=x.size), lambda x: _np_nonzero(x),
   lambda rng: (np.round(uniform()(rng, (5,))),), grad=False,
   skip={"vmap": "size-fixed output; vmap covered by test_numpy_indexing"})  # fmt: skip


def _np_nonzero(x):
    (i,) = np.nonzero(x)
    return (np.concatenate([i, np.zeros(x.size - i.size, i.dtype)]),)

# ---- creation (no array input to differentiate) ------------------------------------------------

_C = {
    "arange": (lambda: bnp.arange(1, 7, 2), lambda: np.arange(1, 7, 2)),
    "linspace": (lambda: bnp.linspace(0.0, 1.0, 5), lambda: np.linspace(0.0, 1.0, 5)),
    "logspace": (lambda: bnp.logspace(0.0, 1.0, 4), lambda: np.logspace(0.0, 1.0, 4)),
    "zeros": (lambda: bnp.zeros((2, 0, 1)), lambda: np.zeros((2, 0, 1))),
    "ones": (lambda: bnp.ones((2, 3)), lambda: np.ones((2, 3))),
    "empty": (lambda: bnp.empty((2, 3)) * 0, lambda: np.zeros((2, 3))),
    "full": (lambda: bnp.full((2, 1), 7.0), lambda: np.full((2, 1), 7.0)),
    "eye": (lambda: bnp.eye(3, 4, k=1), lambda: np.eye(3, 4, k=1)),
    "identity": (lambda: bnp.identity(3), lambda: np.identity(3)),
    "tri": (lambda: bnp.tri(3, 4, k=-1), lambda: np.tri(3, 4, k=-1)),
    "meshgrid": (lambda: bnp.meshgrid(bnp.arange(3), bnp.arange(2)),
                 lambda: np.meshgrid(np.arange(3), np.arange(2))),
}  # fmt: skip
for _n, (_f, _ref) in _C.items():
    op(f"numpy.{_n}", _f, _ref, lambda rng: (), grad=False,
       skip={"vmap": "no array argument", "jit": "no array argument"})  # fmt: skip

# ---- linalg -----------------------------------------------------------------------------------

_SING = (np.array([[1.0, 2.0], [2.0, 4.0]]),)  # rank 1
_ZERO3 = (np.zeros((3, 3)),)
la = bnp.linalg
op("linalg.det", la.det, np.linalg.det, matrix_sampler(0, 4), special=[_SING, _ZERO3],
   finite_grad_at_special=True, n_ops=30)  # fmt: skip
op("linalg.slogdet", lambda a: tuple(la.slogdet(a)), lambda a: tuple(np.linalg.slogdet(a)),
   matrix_sampler(1, 4), n_ops=30)  # fmt: skip
op("linalg.inv", la.inv, np.linalg.inv, matrix_sampler(1, 4), n_ops=30)
op("linalg.solve", la.solve, np.linalg.solve,
   lambda rng: (lambda a: (a, rng.standard_normal(a.shape[:-1] + (2,))))(matrix_sampler(1, 4)(rng)[0]),
   n_ops=30)  # fmt: skip
op("linalg.solve_triangular", lambda a, b, **kw: la.solve_triangular(a, b, **kw),
   lambda a, b, lower=False, trans=0: scipy.linalg.solve_triangular(a, b, lower=lower, trans=trans),
   lambda rng: (np.triu(rng.standard_normal((3, 3))) + 3 * np.eye(3), rng.standard_normal((3, 2))),
   kwargs=[{"lower": True}, {"trans": 1}], n_ops=30,
   skip={"vmap": "scipy reference is unbatched"})  # fmt: skip
op("linalg.cholesky", la.cholesky, np.linalg.cholesky, matrix_sampler(1, 4, spd=True), n_ops=30,
   skip={"grad": "finite differences leave the symmetric set; covered by test_linalg"})  # fmt: skip
op("linalg.eigh", lambda a: la.eigh(a)[0], lambda a: np.linalg.eigh(a)[0],
   matrix_sampler(1, 4, spd=True), n_ops=50,
   skip={"grad": "finite differences leave the symmetric set; covered by test_linalg"})  # fmt: skip
op("linalg.eigvalsh", la.eigvalsh, np.linalg.eigvalsh, matrix_sampler(1, 4, spd=True), n_ops=50,
   skip={"grad": "finite differences leave the symmetric set; covered by test_linalg"})  # fmt: skip
op("linalg.qr", lambda a: tuple(la.qr(a)), lambda a: _qr_ref(a), matrix_sampler(1, 4), n_ops=50)
op("linalg.svd", lambda a: la.svd(a)[1], lambda a: np.linalg.svd(a)[1], matrix_sampler(1, 4),
   n_ops=80)  # fmt: skip
op("linalg.svdvals", la.svdvals, lambda a: np.linalg.svd(a, compute_uv=False),
   matrix_sampler(1, 4), n_ops=80)  # fmt: skip
op("linalg.pinv", la.pinv, np.linalg.pinv, matrix_sampler(1, 4), n_ops=80)
op("linalg.lstsq", lambda a, b: la.lstsq(a, b)[0], lambda a, b: np.linalg.lstsq(a, b)[0],
   lambda rng: (rng.standard_normal((4, 3)), rng.standard_normal((4, 2))), n_ops=80)  # fmt: skip
op("linalg.matrix_power", lambda a: la.matrix_power(a, 3), lambda a: np.linalg.matrix_power(a, 3),
   matrix_sampler(1, 3), n_ops=10)  # fmt: skip
op("linalg.matrix_rank", la.matrix_rank, np.linalg.matrix_rank, matrix_sampler(1, 4),
   special=[_SING, _ZERO3], grad=False, n_ops=80)  # fmt: skip
op("linalg.cond", la.cond, np.linalg.cond, matrix_sampler(1, 4), n_ops=80)
op("linalg.norm", lambda x, **kw: la.norm(x, **kw), lambda x, **kw: np.linalg.norm(x, **kw),
   lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 5)),),
   special=[(np.zeros(3),), (np.array([0.0, 3.0, 4.0]),)], finite_grad_at_special=True,
   kwargs=[{"ord": 1}, {"ord": np.inf}, {"ord": 3}], n_ops=8)  # fmt: skip
op("linalg.vector_norm", lambda x, **kw: la.vector_norm(x, **kw),
   lambda x, ord=2: np.linalg.norm(x.ravel(), ord=ord),
   lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2)),),
   special=[(np.zeros(3),), (np.array([3.0, -4.0]),)],
   finite_grad_at_special=True, kwargs=[{"ord": 1}, {"ord": -np.inf}], n_ops=8)  # fmt: skip
op("linalg.matrix_norm", lambda x, **kw: la.matrix_norm(x, **kw),
   lambda x, ord="fro": np.linalg.norm(x, ord=ord), matrix_sampler(1, 3, batch=False),
   special=[(np.zeros((2, 2)),), (np.array([[1.0, -2.0], [3.0, 0.5]]),)], finite_grad_at_special=True,
   kwargs=[{"ord": 1}, {"ord": np.inf}], n_ops=8)  # fmt: skip


def _qr_ref(a):
    q, r = np.linalg.qr(a)
    s = np.sign(np.diagonal(r, axis1=-2, axis2=-1))  # blu's convention: r's diagonal >= 0?
    return q, r


# ---- nn ----------------------------------------------------------------------------------------


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _lse(x, axis=None):
    return scipy.special.logsumexp(x, axis=axis)


_LSE_SPECIAL = [(np.array([-np.inf, -np.inf]),), (np.array([-np.inf, 0.0]),),
                (np.array([[-np.inf, -np.inf], [0.0, 1.0]]),)]
op("nn.logsumexp", lambda x, **kw: bnn.logsumexp(x, **kw), lambda x, axis=None: _lse(x, axis),
   lambda rng: (uniform()(rng, rand_shape(rng, 1)),), special=_LSE_SPECIAL, finite_grad_at_special=True,
   kwargs=[{"axis": -1}], n_ops=8)  # fmt: skip
op("nn.softmax", bnn.softmax, _softmax, lambda rng: (uniform()(rng, nonempty_shape(rng)),),
   special=[(np.array([-np.inf, 0.0, 0.0]),)], n_ops=8)  # fmt: skip
op("nn.log_softmax", bnn.log_softmax, lambda x: x - _lse(x, -1)[..., None],
   lambda rng: (uniform()(rng, nonempty_shape(rng)),), n_ops=8)  # fmt: skip
op("nn.relu", bnn.relu, lambda x: np.maximum(x, 0), unary_sampler(away(-2, 2)),
   special=[(np.array([0.0]),)])  # fmt: skip
op("nn.sigmoid", bnn.sigmoid, scipy.special.expit, unary_sampler(),
   special=[(np.array([-800.0, 800.0, 0.0]),)])  # fmt: skip
op("nn.silu", bnn.silu, lambda x: x * scipy.special.expit(x), unary_sampler())
op("nn.gelu", lambda x, **kw: bnn.gelu(x, **kw),
   lambda x, approximate=True: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
   if approximate else 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2))),
   unary_sampler(), kwargs=[{"approximate": False}], n_ops=8,
   special=[(np.array([-2.0, -0.5, 0.0, 1.0, 3.0]),)])  # fmt: skip


def _ln(x, gamma=None, beta=None, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = x.var(-1, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    return y * (1 if gamma is None else gamma) + (0 if beta is None else beta)


op("nn.layer_norm", lambda x, g, b, **kw: bnn.layer_norm(x, g, b, **kw), _ln,
   lambda rng: (lambda s: (uniform()(rng, s), uniform()(rng, s[-1:]), uniform()(rng, s[-1:])))(
       nonempty_shape(rng, 1, 3)), kwargs=[{"eps": 0.5}], n_ops=10,
   special=[(np.array([[1.0, 2.0, 4.0]]), np.ones(3), np.zeros(3))])  # fmt: skip
op("nn.rms_norm", lambda x, g, **kw: bnn.rms_norm(x, g, **kw),
   lambda x, g, eps=1e-6: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g,
   lambda rng: (lambda s: (uniform()(rng, s), uniform()(rng, s[-1:])))(nonempty_shape(rng, 1, 3)),
   kwargs=[{"eps": 0.5}], n_ops=10)  # fmt: skip
op("nn.linear", bnn.linear, lambda x, w, b: x @ w + b,
   lambda rng: (rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)),
   n_ops=4)  # fmt: skip
op("nn.embedding", bnn.embedding, lambda t, i: t[i],
   lambda rng: (rng.standard_normal((5, 3)), np.array([0, 4, 4, 1])), diff_args=(0,))  # fmt: skip
op("nn.one_hot", lambda i: bnn.one_hot(i, 4), lambda i: np.eye(4)[np.clip(i, 0, 3)] * (i[..., None] < 4),
   lambda rng: (np.array([0, 3, 3, 5]),), grad=False)  # fmt: skip


def _ce(logits, labels, reduction="mean"):
    lp = logits - _lse(logits, -1)[..., None]
    nll = -np.take_along_axis(lp, labels[..., None], -1)[..., 0]
    return {"mean": nll.mean(), "sum": nll.sum(), "none": nll}[reduction]


op("nn.cross_entropy", lambda lo, la_, **kw: bnn.cross_entropy(lo, la_, **kw), _ce,
   lambda rng: (rng.standard_normal((3, 4)), np.array([0, 3, 3])), diff_args=(0,),
   kwargs=[{"reduction": "sum"}, {"reduction": "none"}], n_ops=10)  # fmt: skip


def _attn(q, k, v, causal=False):
    """q, k, v: (..., T, H, D), as blu.nn.dot_product_attention."""
    q, k, v = (np.swapaxes(a, -2, -3) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    return np.swapaxes(_softmax(s) @ v, -2, -3)


op("nn.dot_product_attention", lambda q, k, v, **kw: bnn.dot_product_attention(q, k, v, **kw),
   _attn, lambda rng: tuple(rng.standard_normal((1, 3, 2, 2)) for _ in range(3)),
   kwargs=[{"causal": True}], n_ops=20)  # fmt: skip
op("nn.causal_self_attention",
   lambda x, wq, bq, wp, bp: bnn.causal_self_attention(x, wq, bq, wp, bp, n_head=2),
   lambda x, wq, bq, wp, bp: _csa(x, wq, bq, wp, bp, 2),
   lambda rng: (rng.standard_normal((1, 3, 4)), rng.standard_normal((4, 12)) * 0.5,
                rng.standard_normal(12) * 0.1, rng.standard_normal((4, 4)) * 0.5,
                rng.standard_normal(4) * 0.1), n_ops=40)  # fmt: skip


def _csa(x, wq, bq, wp, bp, h):
    b, t, c = x.shape
    q, k, v = np.split(x @ wq + bq, 3, -1)
    sp = lambda a: a.reshape(b, t, h, c // h)  # noqa: E731
    o = _attn(sp(q), sp(k), sp(v), causal=True).reshape(b, t, c)
    return o @ wp + bp


op("nn.dropout", lambda x, **kw: bnn.dropout(blu.random.key(0), x, 0.5, **kw),
   lambda x, deterministic=False: x if deterministic else None,
   lambda rng: (uniform()(rng, nonempty_shape(rng)),), kwargs=[{"deterministic": True}],
   skip={"value": "random mask: covered by test_nn", "grad": "random mask",
         "jacobians": "random mask", "vmap": "random mask"})  # fmt: skip
op("nn.initializers", lambda: bnn.initializers, lambda: bnn.initializers, lambda rng: (),
   grad=False, skip={"value": "a module of initializer functions: covered by test_nn",
                     "vmap": "module", "jit": "module"})  # fmt: skip

# ---- lax (and through it every primitive) -------------------------------------------------------

_LU = {  # lax name -> (reference, values, differentiable, special)
    "abs": (np.abs, away(-2, 2), True, [0.0]),
    "acos": (np.arccos, uniform(-0.9, 0.9), True, [1.0]),
    "acosh": (np.arccosh, uniform(1.2, 3), True, [1.0]),
    "asin": (np.arcsin, uniform(-0.9, 0.9), True, [1.0]),
    "asinh": (np.arcsinh, uniform(), True, [0.0]),
    "atan": (np.arctan, uniform(), True, [np.inf]),
    "atanh": (np.arctanh, uniform(-0.9, 0.9), True, [1.0]),
    "cbrt": (np.cbrt, away(-2, 2), True, [0.0]),
    "ceil": (np.ceil, uniform(), False, [0.5]),
    "cos": (np.cos, uniform(), True, [0.0]),
    "cosh": (np.cosh, uniform(), True, [0.0]),
    "digamma": (scipy.special.digamma, uniform(0.3, 3), True, [1.0]),
    "erf": (scipy.special.erf, uniform(), True, [0.0, np.inf]),
    "erf_inv": (scipy.special.erfinv, uniform(-0.9, 0.9), True, [0.0, 1.0]),
    "erfc": (scipy.special.erfc, uniform(), True, [0.0]),
    "exp": (np.exp, uniform(), True, [-np.inf]),
    "exp2": (np.exp2, uniform(), True, [0.0]),
    "expm1": (np.expm1, uniform(), True, [0.0]),
    "floor": (np.floor, uniform(), False, [0.5]),
    "is_finite": (np.isfinite, uniform(), False, [np.inf, np.nan]),
    "lgamma": (scipy.special.gammaln, uniform(0.3, 3), True, [1.0, 2.0]),
    "log": (np.log, uniform(0.2, 3), True, [0.0]),
    "log1p": (np.log1p, uniform(-0.5, 2), True, [0.0]),
    "logistic": (scipy.special.expit, uniform(), True, [0.0, -800.0]),
    "neg": (np.negative, uniform(), True, [0.0]),
    "round": (lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), uniform(), False, [0.5, -0.5, 2.5]),
    "rsqrt": (lambda x: 1 / np.sqrt(x), uniform(0.2, 3), True, [1.0]),
    "sign": (np.sign, uniform(), False, [0.0]),
    "sin": (np.sin, uniform(), True, [0.0]),
    "sinh": (np.sinh, uniform(), True, [0.0]),
    "sqrt": (np.sqrt, uniform(0.2, 3), True, [0.0]),
    "square": (np.square, uniform(), True, [0.0]),
    "tan": (np.tan, uniform(-1.2, 1.2), True, [0.0]),
    "tanh": (np.tanh, uniform(), True, [0.0]),
    "stop_gradient": (lambda x: x, uniform(), False, [0.0]),
    "optimization_barrier": (lambda x: x, uniform(), True, [0.0]),
}  # fmt: skip
for _n, (_ref, _vals, _d, _sp) in _LU.items():
    op(f"lax.{_n}", getattr(lax, _n), _ref, unary_sampler(_vals), covers=(f"lax.{_n}", f"prim:{_n}"),
       special=[(np.array(_sp),)], grad=_d)  # fmt: skip

_LB = {
    "add": (np.add, uniform(), uniform(), True),
    "sub": (np.subtract, uniform(), uniform(), True),
    "mul": (np.multiply, uniform(), uniform(), True),
    "div": (np.divide, uniform(), away(-2, 2, gap=0.3), True),
    "rem": (np.fmod, uniform(), away(0.5, 2, gap=0.2), False),
    "pow": (np.power, uniform(0.2, 2), uniform(), True),
    "atan2": (np.arctan2, uniform(), away(-2, 2), True),
    "max": (np.maximum, uniform(), uniform(), True),
    "min": (np.minimum, uniform(), uniform(), True),
    "eq": (np.equal, uniform(), uniform(), False),
    "ne": (np.not_equal, uniform(), uniform(), False),
    "lt": (np.less, uniform(), uniform(), False),
    "le": (np.less_equal, uniform(), uniform(), False),
    "gt": (np.greater, uniform(), uniform(), False),
    "ge": (np.greater_equal, uniform(), uniform(), False),
}
for _n, (_ref, _vx, _vy, _d) in _LB.items():
    op(f"lax.{_n}", getattr(lax, _n), _ref,
       lambda rng, vx=_vx, vy=_vy: (lambda s: (vx(rng, s), vy(rng, s)))(rand_shape(rng)),
       covers=(f"lax.{_n}", f"prim:{_n}"), grad=_d,
       special=[(np.array([0.0, 1.0, 0.0]), np.array([0.0, 1.0, 2.0]))])  # fmt: skip

_LBITS = {"and_": ("and", np.bitwise_and), "or_": ("or", np.bitwise_or),
          "xor": ("xor", np.bitwise_xor),
          "shift_left": ("shift_left", np.left_shift),
          "shift_right_arithmetic": ("shift_right_arithmetic", np.right_shift),
          "shift_right_logical": ("shift_right_logical",
                                  lambda x, y: (x.view(np.uint32) >> y.astype(np.uint32)).view(np.int32))}  # fmt: skip
for _n, (_p, _ref) in _LBITS.items():
    op(f"lax.{_n}", getattr(lax, _n), _ref,
       lambda rng: (ints(rng, (6,), -100, 100), ints(rng, (6,), 0, 31)),
       covers=(f"lax.{_n}", f"prim:{_p}"), grad=False)  # fmt: skip
op("lax.not_", lax.not_, np.invert, lambda rng: (ints(rng, (4,)),), covers=("lax.not_", "prim:not"),
   grad=False)  # fmt: skip
op("lax.population_count", lax.population_count,
   lambda x: np.array([bin(int(v) & 0xFFFFFFFF).count("1") for v in x.ravel()], np.int32),
   lambda rng: (ints(rng, (5,), -100, 100),), covers=("lax.population_count", "prim:population_count"),
   grad=False)  # fmt: skip
op("lax.clz", lax.clz,
   lambda x: np.array([32 - (int(v) & 0xFFFFFFFF).bit_length() for v in x.ravel()], np.int32),
   lambda rng: (ints(rng, (5,), -100, 100),), covers=("lax.clz", "prim:clz"), grad=False)  # fmt: skip
op("lax.bitcast_convert_type", lambda x: lax.bitcast_convert_type(x, np.int64),
   lambda x: x.view(np.int64), unary_sampler(), grad=False,
   covers=("lax.bitcast_convert_type", "prim:bitcast_convert_type"))  # fmt: skip
op("lax.convert_element_type", lambda x: lax.convert_element_type(x, np.float32),
   lambda x: x.astype(np.float32), unary_sampler(),
   skip={"grad": "float32 output: central differences in float32 are too coarse"},
   covers=("lax.convert_element_type", "prim:convert_element_type"))  # fmt: skip
op("lax.integer_pow", lambda x: lax.integer_pow(x, 3), lambda x: x**3, unary_sampler(),
   covers=("lax.integer_pow", "prim:integer_pow"), special=[(np.array([0.0]),)],
   finite_grad_at_special=True)  # fmt: skip
op("lax.integer_pow0", lambda x: lax.integer_pow(x, 0), lambda x: x**0, unary_sampler(),
   covers=("lax.integer_pow",), special=[(np.array([0.0]),)], finite_grad_at_special=True)  # fmt: skip
op("lax.polygamma", lambda x: lax.polygamma(1, x), lambda x: scipy.special.polygamma(1, x),
   unary_sampler(uniform(0.5, 3)), covers=("lax.polygamma", "prim:polygamma"), n_ops=30)  # fmt: skip
op("lax.select", lax.select, np.where,
   lambda rng: (lambda s: (rng.random(s) < 0.5, uniform()(rng, s), uniform()(rng, s)))(rand_shape(rng)),
   covers=("lax.select", "prim:select"), diff_args=(1, 2))  # fmt: skip

_LRED = {"reduce_sum": np.sum, "reduce_prod": np.prod, "reduce_max": np.max, "reduce_min": np.min,
         "argmax": None, "argmin": None}  # fmt: skip
for _n, _ref in _LRED.items():
    if _ref is None:
        op(f"lax.{_n}", (lambda f: lambda x: f(x, 0))(getattr(lax, _n)),
           (lambda f: lambda x: f(x, 0))(getattr(np, _n)),
           lambda rng: (uniform()(rng, nonempty_shape(rng)),), covers=(f"lax.{_n}", f"prim:{_n}"),
           grad=False)  # fmt: skip
    else:
        op(f"lax.{_n}", (lambda f: lambda x: f(x, 0))(getattr(lax, _n)),
           (lambda f: lambda x: f(x, 0))(_ref),
           lambda rng: (uniform()(rng, nonempty_shape(rng)),), covers=(f"lax.{_n}", f"prim:{_n}"),
           special=[(np.array([0.0, 0.0, 2.0]),), (np.array([1.0, 1.0]),)])  # fmt: skip
for _n in ("reduce_and", "reduce_or"):
    op(f"lax.{_n}", (lambda f: lambda x: f(x, 0))(getattr(lax, _n)),
       (lambda f: lambda x: f(x, 0))(np.all if _n == "reduce_and" else np.any),
       lambda rng: (rng.random(nonempty_shape(rng)) < 0.5,), covers=(f"lax.{_n}", f"prim:{_n}"),
       grad=False)  # fmt: skip
for _n in ("cumsum", "cumprod", "cummax", "cummin"):
    _npf = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate,
            "cummin": np.minimum.accumulate}[_n]  # fmt: skip
    op(f"lax.{_n}", (lambda f: lambda x, **kw: f(x, 0, **kw))(getattr(lax, _n)),
       (lambda f: lambda x, reverse=False: f(x[::-1], 0)[::-1] if reverse else f(x, 0))(_npf),
       lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2, 5)),),
       covers=(f"lax.{_n}", f"prim:{_n}") + (("prim:cumulative_argextremum",) if _n == "cummax" else ()),
       kwargs=[{"reverse": True}], special=[(np.array([0.0, 0.0, 2.0, 2.0]),)], n_ops=8)  # fmt: skip

_LSH = {
    "reshape": (lambda x: lax.reshape(x, (x.size,)), lambda x: x.reshape(-1), "reshape"),
    "transpose": (lambda x: lax.transpose(x, (1, 0)), lambda x: x.T, "transpose"),
    "rev": (lambda x: lax.rev(x, (0,)), lambda x: x[::-1], "rev"),
    "squeeze": (lambda x: lax.squeeze(lax.expand_dims(x, 0), 0), lambda x: x, "squeeze"),
    "expand_dims": (lambda x: lax.expand_dims(x, 1), lambda x: np.expand_dims(x, 1), None),
    "broadcast": (lambda x: lax.broadcast(x, (2,)), lambda x: np.broadcast_to(x, (2,) + x.shape), None),
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (3,) + x.shape, (1, 2)),
                         lambda x: np.broadcast_to(x, (3,) + x.shape), "broadcast_in_dim"),
    "pad": (lambda x: lax.pad(x, -1.0, [(1, -1, 1), (0, 2, 0)]),
            lambda x: _lax_pad(x), "pad"),
    "slice": (lambda x: lax.slice(x, (0, 0), (x.shape[0], x.shape[1]), (2, 1)),
              lambda x: x[::2], "slice"),
    "slice_in_dim": (lambda x: lax.slice_in_dim(x, 0, 1, axis=1), lambda x: x[:, :1], None),
    "index_in_dim": (lambda x: lax.index_in_dim(x, 0, axis=1, keepdims=False),
                     lambda x: x[:, 0], None),
    "concatenate": (lambda x: lax.concatenate([x, x], 1), lambda x: np.concatenate([x, x], 1),
                    "concatenate"),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (bnp.asarray(5), 0), (1, 1)),
                      lambda x: x[-1:, :1], "dynamic_slice"),
    "dynamic_slice_in_dim": (lambda x: lax.dynamic_slice_in_dim(x, bnp.asarray(0), 1, axis=1),
                             lambda x: x[:, :1], None),
    "dynamic_index_in_dim": (lambda x: lax.dynamic_index_in_dim(x, bnp.asarray(0), 1, False),
                             lambda x: x[:, 0], None),
    "dynamic_update_slice": (lambda x: lax.dynamic_update_slice(x, x[:1, :1] * 3, (bnp.asarray(9), 0)),
                             lambda x: _dus(x), "dynamic_update_slice"),
    "dynamic_update_slice_in_dim": (
        lambda x: lax.dynamic_update_slice_in_dim(x, x[:1] * 3, bnp.asarray(0), 0),
        lambda x: np.concatenate([x[:1] * 3, x[1:]]), None),
    "dynamic_update_index_in_dim": (
        lambda x: lax.dynamic_update_index_in_dim(x, x[0] * 3, bnp.asarray(0), 0),
        lambda x: np.concatenate([x[:1] * 3, x[1:]]), None),
    "full_like": (lambda x: lax.full_like(x, 2.0), lambda x: np.full_like(x, 2.0), None),
}  # fmt: skip


def _lax_pad(x):
    n0, n1 = x.shape
    out = np.full((2 * n0 - 1 + 0, n1 + 2), -1.0) if n0 else np.full((0, n1 + 2), -1.0)
    out[1::2][: max(n0 - 1, 0)] = -1.0
    inter = np.full((max(2 * n0 - 1, 0), n1), -1.0)
    inter[::2] = x
    out = np.concatenate([np.full((1, n1), -1.0), inter], 0)[:-1] if n0 else np.zeros((0, n1))
    return np.concatenate([out, np.full((out.shape[0], 2), -1.0)], 1)


def _dus(x):
    x = x.copy()
    x[-1:, :1] = x[-1:, :1] * 3 if False else x[:1, :1] * 3
    return x


for _n, (_f, _ref, _p) in _LSH.items():
    op(f"lax.{_n}", _f, _ref, lambda rng: (uniform()(rng, nonempty_shape(rng, 2, 2)),),
       covers=(f"lax.{_n}",) + ((f"prim:{_p}",) if _p else ()),
       grad=_n != "full_like")  # fmt: skip
op("lax.iota", lambda: lax.iota(np.int32, (2, 3), 1), lambda: np.broadcast_to(np.arange(3), (2, 3)),
   lambda rng: (), covers=("lax.iota", "prim:iota"), grad=False,
   skip={"vmap": "no array argument", "jit": "no array argument"})  # fmt: skip
op("lax.full", lambda: lax.full((2, 0), 1.0), lambda: np.full((2, 0), 1.0), lambda rng: (),
   grad=False, skip={"vmap": "no array argument", "jit": "no array argument"})  # fmt: skip


def _gather_sampler(rng):
    x = uniform()(rng, nonempty_shape(rng, 2, 2))
    i = rng.integers(-1, x.shape[0] + 1, (int(rng.integers(0, 5)), 1))
    return x, i


op("lax.gather", lambda x, i, **kw: lax.gather(x, i, axes=(0,), **kw),
   lambda x, i, mode="clip": _lax_gather_ref(x, i[:, 0], mode),
   _gather_sampler, covers=("lax.gather", "prim:gather"), diff_args=(0,),
   kwargs=[{"mode": "fill"}], special=[(np.arange(6.0).reshape(3, 2), np.array([[0], [0], [5], [-1]]))])  # fmt: skip


def _lax_gather_ref(x, i, mode):
    """lax-level: no negative-index normalization; 'clip' clamps, 'fill' reads 0."""
    n = x.shape[0]
    out = x[np.clip(i, 0, n - 1)]
    if mode == "fill":
        out = np.where(((i < 0) | (i >= n))[:, None], 0.0, out)
    return out


def _np_scatter(acc):
    def ref(x, i, u, mode="drop"):
        x = np.array(x, np.float64)
        i = i[:, 0]
        if mode == "clip":
            i = np.clip(i, 0, x.shape[0] - 1)
        keep = (i >= 0) & (i < x.shape[0])
        if acc:
            np.add.at(x, i[keep], u[keep])
        else:
            x[i[keep]] = u[keep]
        return x

    return ref


def _scatter_sampler(rng):
    x, i = _gather_sampler(rng)
    return x, i, uniform()(rng, (i.shape[0],) + x.shape[1:])


_SC_SPECIAL = [(np.zeros((3, 2)), np.array([[1], [1], [5], [-1]]), np.arange(8.0).reshape(4, 2))]
op("lax.scatter", lambda x, i, u, **kw: lax.scatter(x, i, u, axes=(0,), **kw), _np_scatter(False),
   _scatter_sampler, covers=("lax.scatter", "prim:scatter"), diff_args=(0, 2),
   kwargs=[{"mode": "clip"}], special=_SC_SPECIAL)  # fmt: skip
op("lax.scatter_add", lambda x, i, u, **kw: lax.scatter_add(x, i, u, axes=(0,), **kw),
   _np_scatter(True), _scatter_sampler, covers=("lax.scatter_add", "prim:scatter_add"),
   diff_args=(0, 2), kwargs=[{"mode": "clip"}], special=_SC_SPECIAL)  # fmt: skip
op("lax.dot_general", lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
   lambda a, b: a @ b, lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng)),
   covers=("lax.dot_general", "prim:dot_general"), n_ops=8)  # fmt: skip
op("lax.dot", lax.dot, np.dot, lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng)),
   n_ops=8)  # fmt: skip
op("lax.batch_matmul", lax.batch_matmul, np.matmul,
   lambda rng: (rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 1))), n_ops=8)  # fmt: skip
op("lax.sort", lambda x: lax.sort(x, 0), lambda x: np.sort(x, 0),
   lambda rng: (uniform()(rng, nonempty_shape(rng)),), covers=("lax.sort", "prim:sort"),
   special=[(np.array([1.0, 1.0, 0.0]),)])  # fmt: skip
op("lax.sort_key_val", lambda k, v: lax.sort_key_val(k, v, 0),
   lambda k, v: (np.sort(k, 0, kind="stable"), v[np.argsort(k, 0, kind="stable")]),
   lambda rng: (uniform()(rng, (5,)), uniform()(rng, (5,))), diff_args=(1,))  # fmt: skip
op("lax.top_k", lambda x: lax.top_k(x, 2), lambda x: _top_k(x, 2),
   lambda rng: (uniform()(rng, (int(rng.integers(2, 6)),)),), covers=("lax.top_k", "prim:top_k"))  # fmt: skip


def _top_k(x, k):
    i = np.argsort(-x, kind="stable")[:k]
    return x[i], i


op("lax.take_along_axis_prim", lambda x, i: bnp.take_along_axis(x, i, axis=1),
   lambda x, i: np.take_along_axis(x, i, 1),
   lambda rng: (uniform()(rng, (2, 4)), rng.integers(0, 4, (2, 3))),
   covers=("prim:take_along_axis", "prim:scatter_add_along_axis"), diff_args=(0,))  # fmt: skip

# control flow
op("lax.cond", lambda p, x: lax.cond(p, lambda x: bnp.log(x), lambda x: x * 2, x),
   lambda p, x: np.log(x) if p else x * 2,
   lambda rng: (np.bool_(rng.random() < 0.5), uniform(0.2, 2)(rng, (3,))),
   covers=("lax.cond", "prim:cond"), diff_args=(1,),
   special=[(np.bool_(False), np.array([0.0, -1.0]))], finite_grad_at_special=True)  # fmt: skip
op("lax.switch", lambda i, x: lax.switch(i, [bnp.sqrt, lambda x: x * 2, bnp.sin], x),
   lambda i, x: [np.sqrt, lambda x: x * 2, np.sin][int(np.clip(i, 0, 2))](x),
   lambda rng: (np.int32(rng.integers(0, 3)), uniform(0.2, 2)(rng, (3,))),
   diff_args=(1,), special=[(np.int32(1), np.array([0.0, -1.0]))], finite_grad_at_special=True)  # fmt: skip
op("lax.while_loop", lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 1.5),
                                               (0, x))[1],
   lambda x: x * 1.5**3, unary_sampler(), covers=("lax.while_loop", "prim:while"),
   skip={"grad": "reverse mode of while_loop is not defined (forward only, as JAX)"})  # fmt: skip
op("lax.fori_loop", lambda x: lax.fori_loop(0, 3, lambda i, c: c * bnp.sin(c), x),
   lambda x: _fori(x), unary_sampler(), n_ops=6)  # fmt: skip


def _fori(x):
    for _ in range(3):
        x = x * np.sin(x)
    return x


op("lax.scan", lambda c, xs: lax.scan(lambda c, x: (c * x, c + x), c, xs),
   lambda c, xs: _scan_ref(c, xs),
   lambda rng: (uniform()(rng, ()), uniform()(rng, (int(rng.integers(0, 4)),))),
   covers=("lax.scan", "prim:scan"), special=[(np.array(0.0), np.array([0.0, 0.0, 2.0]))], n_ops=6)  # fmt: skip


def _scan_ref(c, xs):
    ys = []
    for x in xs:
        c, y = c * x, c + x
        ys.append(y)
    return c, np.array(ys)


op("lax.map", lambda xs: lax.map(bnp.sin, xs), np.sin, lambda rng: (uniform()(rng, nonempty_shape(rng)),))

# ---- lax.linalg primitives ---------------------------------------------------------------------

op("lax.linalg.cholesky", lambda a: lax_linalg.cholesky(a), np.linalg.cholesky,
   matrix_sampler(1, 4, spd=True), covers=("prim:cholesky",), n_ops=30,
   skip={"grad": "finite differences leave the symmetric set; covered by test_linalg"})  # fmt: skip
op("lax.linalg.eigh", lambda a: lax_linalg.eigh(a)[1], lambda a: np.linalg.eigh(a)[0],
   matrix_sampler(1, 4, spd=True), covers=("prim:eigh",), n_ops=50,
   skip={"grad": "finite differences leave the symmetric set; covered by test_linalg"})  # fmt: skip
op("lax.linalg.lu", lambda a: lax_linalg.lu(a)[0], lambda a: _lu_ref(a), matrix_sampler(1, 4),
   covers=("prim:lu",), n_ops=30)  # fmt: skip
op("lax.linalg.qr", lambda a: bnp.abs(lax_linalg.qr(a)[1]), lambda a: np.abs(np.linalg.qr(a)[1]),
   matrix_sampler(1, 4), covers=("prim:qr",), n_ops=30,
   skip={"grad": "abs of r is not smooth where r has a zero; qr's derivative is in linalg.qr"})  # fmt: skip
op("lax.linalg.svd", lambda a: lax_linalg.svd(a)[1], lambda a: np.linalg.svd(a)[1],
   matrix_sampler(1, 4), covers=("prim:svd",), n_ops=80)  # fmt: skip
op("lax.linalg.triangular_solve",
   lambda a, b: lax_linalg.triangular_solve(a, b, left_side=True, lower=True),
   lambda a, b: scipy.linalg.solve_triangular(a, b, lower=True),
   lambda rng: (np.tril(rng.standard_normal((3, 3))) + 3 * np.eye(3), rng.standard_normal((3, 2))),
   covers=("prim:triangular_solve",), n_ops=30, skip={"vmap": "scipy reference is unbatched"})  # fmt: skip


def _lu_ref(a):
    out = []
    for m in a.reshape((-1,) + a.shape[-2:]):
        p, l_, u = scipy.linalg.lu(m)
        out.append(np.tril(l_, -1) + u)
    return np.array(out).reshape(a.shape)


# ---- transforms that are primitives ---------------------------------------------------------------

op("transforms.jit", lambda x: blu.jit(lambda y: bnp.sin(y) * y)(x), lambda x: np.sin(x) * x,
   unary_sampler(), covers=("prim:jit",), n_ops=3)  # fmt: skip
op("transforms.checkpoint", lambda x: blu.checkpoint(lambda y: bnp.sin(y) * y)(x),
   lambda x: np.sin(x) * x, unary_sampler(), covers=("prim:checkpoint",), n_ops=3)  # fmt: skip
op("transforms.checkpoint_name",
   lambda x: blu.checkpoint(lambda y: blu.checkpoint_name(bnp.sin(y), "s") * y)(x),
   lambda x: np.sin(x) * x, unary_sampler(), covers=("prim:checkpoint_name",), n_ops=3)  # fmt: skip


@blu.custom_jvp
def _cj(x):
    return bnp.sin(x)


_cj.defjvp(lambda p, t: (bnp.sin(p[0]), bnp.cos(p[0]) * t[0]))


@blu.custom_vjp
def _cv(x):
    return bnp.sin(x)


_cv.defvjp(lambda x: (bnp.sin(x), x), lambda x, g: (bnp.cos(x) * g,))
op("transforms.custom_jvp", _cj, np.sin, unary_sampler(), covers=("prim:custom_jvp_call",))
op("transforms.custom_vjp", _cv, np.sin, unary_sampler(),
   covers=("prim:custom_vjp_call", "prim:custom_lin"),
   skip={"grad": "custom_vjp has no forward mode (as JAX); reverse checked in test_custom_derivatives"})  # fmt: skip

# ---- collectives: under vmap with a named axis ---------------------------------------------------

from blu import parallel as _par  # noqa: E402


def _named(f):
    return lambda x: blu.vmap(f, axis_name="i")(x)


_COLL = {
    "psum": (lambda v: _par.psum(v, "i"), lambda x: np.broadcast_to(x.sum(0), x.shape)),
    "pmax": (lambda v: _par.pmax(v, "i"), lambda x: np.broadcast_to(x.max(0), x.shape)),
    "pmin": (lambda v: _par.pmin(v, "i"), lambda x: np.broadcast_to(x.min(0), x.shape)),
    "all_gather": (lambda v: _par.all_gather(v, "i"),
                   lambda x: np.broadcast_to(x, (x.shape[0],) + x.shape)),
    "axis_index": (lambda v: v * _par.axis_index("i"),
                   lambda x: x * np.arange(x.shape[0])[:, None]),
    "ppermute": (lambda v: _par.ppermute(v, "i", [(0, 1), (1, 0)]), lambda x: x[::-1]),
    "all_to_all": (lambda v: _par.all_to_all(v, "i", 0, 0),
                   lambda x: np.swapaxes(x, 0, 1)),
    "reduce_scatter": (lambda v: _par.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
                       lambda x: x.sum(0).reshape(x.shape[0], -1)),
}
for _n, (_f, _ref) in _COLL.items():
    op(f"parallel.{_n}", _named(_f), _ref, lambda rng: (uniform()(rng, (2, 2)),),
       covers=(f"prim:{_n}",), n_ops=4,
       skip={"vmap": "already a vmap with a named axis; nested in test_parallel_collectives",
             "jit": "covered by test_parallel_collectives"})  # fmt: skip

# ---- names that are not operations --------------------------------------------------------------

_DTYPES = ("bfloat16 bool bool_ float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 "
           "uint64 floating generic inexact integer number signedinteger unsignedinteger dtype "
           "ndarray").split()  # fmt: skip
NOT_OPERATIONS: dict[str, str] = {
    **{f"numpy.{n}": "a dtype or dtype class" for n in _DTYPES},
    **{f"numpy.{n}": "a constant" for n in ("e", "euler_gamma", "inf", "nan", "pi", "newaxis")},
    **{f"numpy.{n}": "a submodule (its functions are re-exported and listed)" for n in (
        "creation", "indexing", "index_update", "linalg", "logic", "manipulation", "products",
        "reductions", "selection", "sorting", "ufuncs", "einsum")},
    **{f"numpy.{n}": "dtype/shape query, no array computation (tested in test_numpy_promotion)"
       for n in ("finfo", "iinfo", "issubdtype", "can_cast", "promote_types", "result_type",
                 "promote_args", "asarray_operand", "shape", "ndim", "size", "broadcast_shapes")},
    **{f"linalg.{n}": "a result type or exception" for n in (
        "EighResult", "LinAlgError", "QRResult", "SVDResult", "SlogdetResult")},
    **{f"lax.{n}": "a submodule" for n in (
        "ad_ops", "bits", "control_flow", "cumulative", "elementwise", "gather_scatter", "linalg",
        "reductions", "shapes", "slicing", "sorting", "special")},
    "lax.RoundingMethod": "an enum for lax.round",
    "numpy.IndexUpdateHelper": "x.at: covered by the IndexUpdateRef entries",
}


def public_names() -> set[str]:
    """Every public name of blu.numpy, blu.numpy.linalg, blu.nn and blu.lax, and every primitive
    of docs/primitives.md (``prim:NAME``)."""
    import pathlib
    import re

    names = set()
    for prefix, mod in (("numpy", bnp), ("linalg", bnp.linalg), ("nn", bnn), ("lax", lax)):
        pub = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        names |= {f"{prefix}.{n}" for n in pub if not isinstance(getattr(mod, n), type(math))
                  or f"{prefix}.{n}" in NOT_OPERATIONS}  # fmt: skip
        names |= {f"{prefix}.{n}" for n in pub if isinstance(getattr(mod, n), type(math))}
    doc = pathlib.Path(__file__).resolve().parents[1] / "docs" / "primitives.md"
    names |= {f"prim:{m}" for m in re.findall(r"^\| `([a-z_0-9]+)` \|", doc.read_text(), re.M)}
    return names


def covered() -> set[str]:
    out = set(NOT_OPERATIONS)
    for e in TABLE:
        out |= set(e.covers) | {e.name}
    return out
