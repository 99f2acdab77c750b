"""OpInfo entries: the Array API standard's names in blu.numpy (``standard.py``, ``sets.py``,
``devices.py``) and blu.numpy.linalg (``linalg/standard.py``); docs/array_api.md.

References are numpy float64 (numpy 2 has most of these under the same names). The standard's
aliases of numpy functions get their own special points (domain edges, signed zeros, shifts past
the bit width), since they are public names of their own.
"""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from blu import lax
from ops.base import (
    NOT_OPERATIONS,
    away,
    binary_sampler,
    broadcast_pair,
    ints,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

NOT_OPERATIONS.update(
    {
        **{
            f"numpy.{n}": "a submodule (its functions are re-exported and listed)"
            for n in ("devices", "sets", "standard")
        },
        "numpy.isdtype": "dtype query, no array computation (tested in test_numpy_array_api)",
    }
)

_INF, _NAN = np.inf, np.nan

# ---- the standard's names for numpy's functions --------------------------------------------------

_U = {  # name -> (numpy reference, sampler of values, special points)
    "acos": (np.acos, uniform(-0.9, 0.9), [1.0, -1.0, 0.0, -0.0, 1.5, _NAN]),
    "asin": (np.asin, uniform(-0.9, 0.9), [1.0, -1.0, 0.0, -0.0, -1.5, _NAN]),
    "atan": (np.atan, uniform(), [0.0, -0.0, _INF, -_INF, 1e30, _NAN]),
    "acosh": (np.acosh, uniform(1.2, 3), [1.0, 0.5, _INF, _NAN]),
    "asinh": (np.asinh, uniform(), [0.0, -0.0, _INF, -_INF, 1e30, -1e30, _NAN]),
    "atanh": (np.atanh, uniform(-0.9, 0.9), [0.0, -0.0, 1.0, -1.0, 2.0, _NAN]),
}
for _n, (_ref, _vals, _sp) in _U.items():
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        _ref,
        unary_sampler(_vals),
        special=[(np.array(_sp + [1e300, -1e300]),), (np.array(_sp, np.float32),)],
    )

_B = {  # name -> (numpy reference, x values, y values, special points (x, y))
    "atan2": (
        np.atan2,
        uniform(),
        away(-2, 2),
        [(0.0, 1.0), (0.0, -1.0), (-0.0, -1.0), (0.0, -0.0), (-0.0, -0.0), (0.0, 0.0)]
        + [(_INF, _INF), (-_INF, -_INF), (1.0, _INF), (1.0, -_INF), (_NAN, 1.0)],
    ),
    "pow": (
        np.pow,
        uniform(0.2, 2),
        uniform(),
        [(0.0, 0.0), (0.0, -1.0), (-0.0, -1.0), (0.0, 2.0), (-8.0, 1 / 3), (-2.0, 3.0)]
        + [(_INF, 0.0), (_NAN, 0.0), (1.0, _NAN), (1.0, _INF), (0.5, _INF), (2.0, -_INF)],
    ),
}
for _n, (_ref, _vx, _vy, _sp) in _B.items():
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        _ref,
        binary_sampler(_vx, _vy),
        special=[(np.array([p[0] for p in _sp]), np.array([p[1] for p in _sp]))],
    )

_I32 = np.iinfo(np.int32)
op(
    "numpy.bitwise_invert",
    bnp.bitwise_invert,
    np.bitwise_invert,
    lambda rng: (ints(rng, rand_shape(rng)),),
    special=[
        (np.array([0, -1, _I32.min, _I32.max], np.int32),),
        (np.array([0, 1, 255], np.uint8),),
        (np.array([True, False]),),
    ],
    grad=False,
)
_SHIFT_SPECIAL = [  # shifts of 0, the last bit, and past the bit width (numpy: 0, or -1 / 0)
    (
        np.array([1, -1, _I32.min, _I32.max, 5, -5, 7], np.int32),
        np.array([0, 31, 1, 1, 32, 40, 33], np.int32),
    ),
    (np.array([1, 200, 255, 3], np.uint8), np.array([7, 1, 8, 0], np.uint8)),
]
for _n, _ref in {
    "bitwise_left_shift": np.bitwise_left_shift,
    "bitwise_right_shift": np.bitwise_right_shift,
}.items():
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        _ref,
        lambda rng: (lambda a, b: (ints(rng, a), ints(rng, b, 0, 8)))(*broadcast_pair(rng)),
        special=_SHIFT_SPECIAL,
        grad=False,
    )

# ---- nextafter, imag, diff, unstack -------------------------------------------------------------


def _bits_blu(o):
    """The bit pattern of ``o`` as a signed integer (NaN as 0: payloads are not compared)."""
    idt = {4: bnp.int32, 8: bnp.int64}[np.dtype(o.dtype).itemsize]
    return bnp.where(bnp.isnan(o), 0, lax.bitcast_convert_type(o, idt))


def _bits_np(o):
    idt = {4: np.int32, 8: np.int64}[o.dtype.itemsize]
    return np.where(np.isnan(o), 0, o.view(idt))


_F64 = np.finfo(np.float64)
_NA = [  # (x1, x2): zeros (the smallest subnormal, signed), equal, inf, NaN, the extremes
    (0.0, 1.0), (0.0, -1.0), (-0.0, 0.0), (0.0, -0.0), (1.0, 1.0), (1.0, 2.0), (1.0, 0.0),
    (-1.0, 0.0), (-1.0, -2.0), (_INF, 0.0), (_INF, _INF), (-_INF, 0.0), (_NAN, 1.0), (1.0, _NAN),
    (_F64.max, _INF), (-_F64.max, -_INF), (_F64.smallest_subnormal, -1.0),
    (-_F64.smallest_subnormal, 1.0), (_F64.smallest_normal, 0.0),
]  # fmt: skip
_NA_SPECIAL = [
    (np.array([p[0] for p in _NA]), np.array([p[1] for p in _NA])),
    (
        np.array([p[0] for p in _NA[:14]], np.float32),
        np.array([p[1] for p in _NA[:14]], np.float32),
    ),
]
op(  # the value (to the dtype's tolerance) and its derivative: 1 in x1, 0 in x2
    "numpy.nextafter",
    bnp.nextafter,
    np.nextafter,
    binary_sampler(),
    special=_NA_SPECIAL,
)
op(  # the bits, exactly: one ulp is below the value tolerance (NaN payloads not compared)
    "numpy.nextafter:bits",
    lambda x1, x2: _bits_blu(bnp.nextafter(x1, x2)),
    lambda x1, x2: _bits_np(np.nextafter(x1, x2)),
    binary_sampler(),
    covers=("numpy.nextafter",),
    special=_NA_SPECIAL,
    grad=False,
)

op(
    "numpy.imag",
    bnp.imag,
    np.imag,
    unary_sampler(),
    special=[
        (np.array([_NAN, _INF, -_INF, -0.0, 1.0]),),
        (np.array([-3, 0, 7], np.int8),),
        (np.array([True, False]),),
    ],
)


def _diff_sampler(rng):
    x = uniform()(rng, rand_shape(rng, 1))
    axis = int(rng.integers(-x.ndim, x.ndim))
    prepend = None
    if rng.random() < 0.5:
        shape = list(x.shape)
        shape[axis] = int(rng.integers(0, 3))
        prepend = uniform()(rng, tuple(shape))
    return x, axis, prepend


def _np_diff(x, axis, prepend=None, **kw):
    if prepend is not None:
        kw["prepend"] = prepend
    return np.diff(x, axis=axis, **kw)


op(
    "numpy.diff",
    lambda x, axis, prepend=None, **kw: bnp.diff(x, axis=axis, prepend=prepend, **kw),
    _np_diff,
    _diff_sampler,
    special=[
        (np.array([1.0, _INF, _INF, -_INF, _NAN, 2.0]), -1, np.array([_INF])),
        (np.array([True, False, False, True]), 0, None),
        (np.array([[3, -2, 7], [1, 1, 0]], np.int32), 1, None),
        (np.array([[2.0], [5.0]]), -1, None),  # one element: n >= 1 leaves none
        (np.zeros((2, 0)), 1, None),
    ],
    kwargs=[{"n": 2}, {"n": 0}, {"append": -1.5}],
)

op(
    "numpy.unstack",
    lambda x, **kw: bnp.unstack(x, **kw),
    lambda x, axis=0: tuple(np.moveaxis(x, axis, 0)),
    lambda rng: (uniform()(rng, rand_shape(rng, 2, 3)),),
    special=[(np.arange(6.0).reshape(2, 3),), (np.zeros((3, 0)),), (np.zeros((0, 2)),)],
    kwargs=[{"axis": 1}, {"axis": -1}],
)

op(
    "numpy.from_dlpack",
    bnp.from_dlpack,
    lambda x: np.array(x),
    unary_sampler(),
    special=[
        (np.arange(6.0).reshape(2, 3).T,),  # a strided view
        (np.array([-128, 0, 127], np.int8),),
        (np.array([True, False]),),
        (np.array(2.5),),
        (np.zeros((0, 3)),),
        (bnp.asarray([1.0, _NAN]),),  # a blu array: returned as is
    ],  # (a traced value is returned as is: derivatives, vmap and jit see the identity)
)

# ---- unique_* ----------------------------------------------------------------------------------


def _np_unique(x, size, fill_value=None):
    """values, first indices, inverse indices (x's shape), counts; NaNs distinct; padded to
    ``size`` with ``fill_value`` (default the smallest value: the first sorted one, JAX's, not
    a NaN minimum), the smallest value's index (JAX's) and count 0."""
    flat = x.reshape(-1)
    v, idx, inv, cnt = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    if size is not None:
        pad = size - v.size
        fill = (np.sort(flat)[0] if flat.size else 0) if fill_value is None else fill_value
        v = np.concatenate([v, np.full(pad, fill, v.dtype)])
        idx = np.concatenate([idx, np.full(pad, idx[0] if idx.size else 0, idx.dtype)])
        cnt = np.concatenate([cnt, np.zeros(pad, cnt.dtype)])
    return v, idx, inv.reshape(x.shape), cnt


def _ties_sampler(rng):
    """Values on a coarse grid (ties), sometimes NaNs or int32; ``size`` fits every group, with
    padding where there are ties."""
    shape = rand_shape(rng)
    x = rng.integers(-2, 3, shape) * 0.5
    if rng.random() < 0.3 and x.size:
        x.reshape(-1)[rng.integers(0, x.size, 2)] = _NAN
    if rng.random() < 0.3:
        x = (2 * np.nan_to_num(x)).astype(np.int32)
    return x, x.size + int(rng.integers(0, 2))


_TIES_SPECIAL = [
    (np.array([[1.0, _NAN, 1.0], [_NAN, -0.0, 0.0]]), None),  # each NaN its own group
    (np.array([[1.0, _NAN, 1.0], [_NAN, -0.0, 0.0]]), 7),
    (np.array([_INF, -_INF, _INF, 3.0]), 3),
    (np.array([4, 4, -1, 4], np.int32), 4),
    (np.array([True, False, True]), None),
    (np.array(2.0), 1),
    (np.zeros((0,)), 2),
]
_PICK = {  # name -> the parts of (values, indices, inverse, counts) it returns
    "unique_all": (0, 1, 2, 3),
    "unique_counts": (0, 3),
    "unique_inverse": (0, 2),
    "unique_values": (0,),
}
for _n, _parts in _PICK.items():

    def _ref(x, size, fill_value=None, parts=_parts):
        out = _np_unique(x, size, fill_value)
        return out[0] if len(parts) == 1 else tuple(out[i] for i in parts)

    op(
        f"numpy.{_n}",
        (lambda f: lambda x, size, **kw: f(x, size=size, **kw))(getattr(bnp, _n)),
        _ref,
        _ties_sampler,
        special=_TIES_SPECIAL,
        kwargs=[{"fill_value": -7.0}],
        grad=False,  # ties: a finite-difference step splits groups (see the entry below)
    )


def _distinct_sampler(rng):
    x = uniform()(rng, rand_shape(rng))
    return x, x.size + int(rng.integers(0, 2))


op(
    "numpy.unique_all:grad",
    lambda x, size: bnp.unique_all(x, size=size),
    lambda x, size: _np_unique(x, size),
    _distinct_sampler,
    covers=("numpy.unique_all", "numpy.unique_values", "numpy.unique_counts"),
    n_ops=2,
)

# ---- linalg: the standard's forms on the last axes ---------------------------------------------


def _trailing_sampler(first=3):
    """Two broadcasting stacks whose ``axis`` (-1 or -2, returned last) has size ``first``."""

    def s(rng):
        a, b = broadcast_pair(rng)
        n = first if first is not None else int(rng.integers(0, 5))
        axis = -int(rng.integers(1, 3))
        tail = (n,) if axis == -1 else (n, int(rng.integers(1, 3)))
        return rng.standard_normal(a + tail), rng.standard_normal(b + tail), axis

    return s


_E = np.eye(3)
op(
    "linalg.cross",
    lambda a, b, axis: bnp.linalg.cross(a, b, axis=axis),
    lambda a, b, axis: np.cross(a, b, axis=axis),
    _trailing_sampler(3),
    special=[
        (_E, np.roll(_E, 1, 0), -1),  # e_i x e_{i+1}
        (_E, np.roll(_E, 1, 0), -2),
        (np.array([1.0, -2.0, 3.0]), np.array([2.0, -4.0, 6.0]), -1),  # parallel: 0
        (np.array([_INF, 0.0, 1.0]), np.array([1.0, 1.0, 0.0]), -1),
    ],
    n_ops=3,
)
op(
    "linalg.vecdot",
    lambda a, b, axis: bnp.linalg.vecdot(a, b, axis=axis),
    lambda a, b, axis: np.sum(np.conj(a) * b, axis=axis),
    _trailing_sampler(None),
    special=[
        (np.zeros((2, 0)), np.zeros((0,)), -1),
        (np.array([_INF, 1.0]), np.array([0.0, 1.0]), -1),
        (np.arange(6.0).reshape(3, 2), np.ones((3, 1)), -2),
    ],
    n_ops=8,
)


def _matmul_sampler(rng):
    n, k, m = (int(rng.integers(0, 4)) for _ in range(3))
    a, b = broadcast_pair(rng)
    a, b = a[-2:], b[-2:]
    return rng.standard_normal(a + (n, k)), rng.standard_normal(b + (k, m))


def _np_matmul(a, b, preferred_element_type=None):
    out = np.matmul(a, b)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


op(
    "linalg.matmul",
    lambda a, b, **kw: bnp.linalg.matmul(a, b, **kw),
    _np_matmul,
    _matmul_sampler,
    special=[
        (np.array([1.0, 2.0]), np.arange(6.0).reshape(2, 3)),  # vector @ matrix
        (np.arange(6.0).reshape(3, 2), np.array([1.0, -1.0])),
        (np.array([1.0, 2.0]), np.array([3.0, 0.1])),  # a scalar
        (np.zeros((2, 0)), np.zeros((0, 3))),  # an empty sum: zeros
        (np.array([[_INF, 1.0]]), np.array([[0.0], [1.0]])),
    ],
    kwargs=[{"preferred_element_type": np.float32}],
    n_ops=8,
)
op(
    "linalg.matrix_transpose",
    bnp.linalg.matrix_transpose,
    lambda x: np.swapaxes(x, -1, -2),
    lambda rng: (uniform()(rng, rand_shape(rng, 2, 4)),),
    special=[(np.arange(6.0).reshape(2, 3),), (np.zeros((2, 0, 3)),)],
)
op(
    "linalg.outer",
    bnp.linalg.outer,
    np.outer,
    lambda rng: tuple(uniform()(rng, rand_shape(rng, 1, 1)) for _ in range(2)),
    special=[(np.array([0.0, 1.0]), np.array([_INF, 2.0, -1.0])), (np.zeros(0), np.ones(3))],
)


def _tensordot_sampler(rng):
    p, q = (int(rng.integers(0, 4)) for _ in range(2))
    return rng.standard_normal((p, q, q)), rng.standard_normal((q, q, p))


op(
    "linalg.tensordot",
    lambda a, b, **kw: bnp.linalg.tensordot(a, b, **kw),
    lambda a, b, axes=2: np.tensordot(a, b, axes=axes),
    _tensordot_sampler,
    special=[(np.arange(18.0).reshape(2, 3, 3) / 7, np.arange(18.0).reshape(3, 3, 2) - 5)],
    kwargs=[{"axes": 1}, {"axes": 0}, {"axes": ([0, 2], [2, 1])}],
    n_ops=8,
)

_SQ = np.array([[0.1, 2.0, 3.0], [4.0, 0.2, 6.0]])  # 0.1 + 0.2 rounds differently in float32
op(
    "linalg.diagonal",
    lambda x, **kw: bnp.linalg.diagonal(x, **kw),
    lambda x, offset=0: np.diagonal(x, offset, -2, -1),
    lambda rng: (uniform()(rng, rand_shape(rng, 2, 4)),),
    special=[(_SQ,), (np.stack([_SQ, -_SQ]),), (np.zeros((0, 3)),)],
    kwargs=[{"offset": 1}, {"offset": -1}, {"offset": 5}],
)
op(
    "linalg.trace",
    lambda x, **kw: bnp.linalg.trace(x, **kw),
    lambda x, offset=0, dtype=None: np.trace(x, offset, -2, -1, dtype=dtype),
    lambda rng: (uniform()(rng, rand_shape(rng, 2, 4)),),
    special=[
        (_SQ,),
        (np.stack([_SQ, -_SQ]),),
        (np.array([[_INF, 1.0], [2.0, -_INF]]),),
        (np.array([[3, 1], [-5, 2]], np.int32),),
        (np.zeros((2, 0)),),
    ],
    kwargs=[{"offset": 1}, {"offset": -1}, {"dtype": np.float32}],
)
