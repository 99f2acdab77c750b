"""OpInfo entries: lax.reduce_window (add, max, min) and blu.nn's pooling; references are
float64 loops over the windows."""

from __future__ import annotations

import itertools

import numpy as np

import blu.nn as bnn
import blu.numpy as bnp
from blu import lax
from ops.base import op

_MONOIDS = {"add": (lax.add, 0.0, np.add), "max": (lax.max, -np.inf, np.maximum),
            "min": (lax.min, np.inf, np.minimum)}  # fmt: skip


def _window_ref(x, monoid, wdims, strides, pads):
    """Each window reduced by a loop; pads hold the identity."""
    _, ident, ufunc = _MONOIDS[monoid]
    xp = np.pad(x.astype(np.float64), pads, constant_values=ident)
    out_sp = [max((p - w) // s + 1, 0) for p, w, s in zip(xp.shape, wdims, strides)]
    out = np.full(out_sp, ident)
    for pos in itertools.product(*map(range, out_sp)):
        for ks in itertools.product(*map(range, wdims)):
            out[pos] = ufunc(out[pos], xp[tuple(p * s + k for p, s, k in zip(pos, strides, ks))])
    return out


def _sample(rng):
    """x, window, strides, pads: pads shorter than the window, so no window is all padding."""
    r = int(rng.integers(1, 4))
    shape = tuple(int(rng.integers(1, 6)) for _ in range(r))
    wdims = tuple(int(rng.integers(1, 4)) for _ in range(r))
    wdims = tuple(min(w, n + 1) for w, n in zip(wdims, shape))
    strides = tuple(int(rng.integers(1, 3)) for _ in range(r))
    pads = tuple((int(rng.integers(0, w)), int(rng.integers(0, w))) for w in wdims)
    pads = tuple((lo, max(hi, w - n - lo)) for (lo, hi), w, n in zip(pads, wdims, shape))
    return rng.standard_normal(shape), wdims, strides, pads


for _m, _prim in (("add", "sum"), ("max", "max"), ("min", "min")):
    op(
        "lax.reduce_window" + ("" if _m == "add" else f" {_m}"),
        (lambda f, init: lambda x, w, s, p: lax.reduce_window(x, init, f, w, s, p))(
            *_MONOIDS[_m][:2]
        ),
        (lambda m: lambda x, w, s, p: _window_ref(x, m, w, s, p))(_m),
        _sample,
        covers=(("lax.reduce_window",) if _m == "add" else ())
        + (f"prim:reduce_window_{_prim}",)
        # the max's derivatives: select-and-gather and its transpose, select-and-scatter-add
        + (("prim:window_gather", "prim:window_scatter") if _m == "max" else ()),
        special=[(np.array([1.0, 3.0, 3.0, np.inf, -np.inf]), (2,), (1,), ((0, 1),))],
        n_ops=9,
    )


def _pool_sample(rng):
    """NHWC (or HWC: no batch) inputs, a window, strides and padding."""
    s = int(rng.integers(1, 3))
    sp = tuple(int(rng.integers(2, 6)) for _ in range(s))
    batch = (int(rng.integers(1, 3)),) if rng.random() < 0.7 else ()
    x = rng.standard_normal(batch + sp + (int(rng.integers(1, 3)),))
    window = tuple(int(rng.integers(1, 3)) for _ in range(s))
    strides = tuple(int(rng.integers(1, 3)) for _ in range(s))
    return x, window, strides, "SAME" if rng.random() < 0.5 else "VALID"


def _pool_ref(monoid, mean=False):
    def ref(x, window, strides, padding, count_include_pad=True):
        s = len(window)
        nb = x.ndim - s - 1
        wdims, st = (1,) * nb + window + (1,), (1,) * nb + strides + (1,)
        pads = [(0, 0)] * x.ndim
        if padding == "SAME":
            for a, (n, w, k) in enumerate(zip(x.shape[nb:-1], window, strides)):
                tot = max((-(-n // k) - 1) * k + w - n, 0)
                pads[nb + a] = (tot // 2, tot - tot // 2)
        out = _window_ref(x, monoid, wdims, st, pads)
        if not mean:
            return out
        if count_include_pad:
            return out / np.prod(window)
        return out / _window_ref(np.ones(x.shape), "add", wdims, st, pads)

    return ref


# ties and a window over the border (SAME: the pads are counted by count_include_pad only)
_POOL_SPECIAL = [
    (
        np.array([[[[1.0], [3.0], [3.0]], [[3.0], [0.0], [2.0]], [[1.0], [1.0], [3.0]]]]),
        (2, 2),
        (1, 1),
        "SAME",
    )
]
op("nn.max_pool", bnn.max_pool, _pool_ref("max"), _pool_sample, special=_POOL_SPECIAL, n_ops=9)
op("nn.min_pool", bnn.min_pool, _pool_ref("min"), _pool_sample, special=_POOL_SPECIAL, n_ops=9)
op("nn.avg_pool", bnn.avg_pool, _pool_ref("add", mean=True), _pool_sample,
   special=_POOL_SPECIAL, kwargs=[{"count_include_pad": False}], n_ops=10)  # fmt: skip


# ---- reduce_window with other computations: the general path (pad, strided slices, a fold) ----


def _fold_ref(xs, inits, combine, wdims, strides, pads):
    """Each window folded by a loop from the init values; pads hold them (lists of arrays)."""
    xps = [np.pad(x, pads, constant_values=i) for x, i in zip(xs, inits)]
    out_sp = [max((p - w) // s + 1, 0) for p, w, s in zip(xps[0].shape, wdims, strides)]
    outs = [np.empty(out_sp, x.dtype) for x in xs]
    for pos in itertools.product(*map(range, out_sp)):
        acc = list(inits)
        for ks in itertools.product(*map(range, wdims)):
            idx = tuple(p * s + k for p, s, k in zip(pos, strides, ks))
            acc = combine(acc, [xp[idx] for xp in xps])
        for o, v in zip(outs, acc):
            o[pos] = v
    return outs


op(
    "lax.reduce_window logaddexp",
    lambda x, w, s, p: lax.reduce_window(x, -np.inf, bnp.logaddexp, w, s, p),
    lambda x, w, s, p: _fold_ref(
        [x.astype(np.float64)], [-np.inf], lambda a, b: [np.logaddexp(a[0], b[0])], w, s, p
    )[0],
    _sample,
    special=[(np.array([1.0, 3.0, 3.0, np.inf, -np.inf]), (2,), (1,), ((0, 1),))],
    n_ops=12,
)


def _argmax_pair(a, b):
    take_b = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
    return bnp.where(take_b, b[0], a[0]), bnp.where(take_b, b[1], a[1])


def _argmax_ref(x, i, w, s, p):
    def combine(a, b):
        return list(b) if b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]) else list(a)

    big = np.iinfo(np.int32).max
    return tuple(_fold_ref([x.astype(np.float64), i], [-np.inf, big], combine, w, s, p))


_PAD = ((0, 1),)  # the tie (3, 3) goes to the first index


def _argmax_sample(rng):
    x, w, s, p = _sample(rng)
    return x, np.arange(x.size, dtype=np.int32).reshape(x.shape), w, s, p


op(
    "lax.reduce_window argmax pair",  # variadic: (value, index) operands and init values
    lambda x, i, w, s, p: lax.reduce_window(
        (x, i), (-np.inf, np.int32(np.iinfo(np.int32).max)), _argmax_pair, w, s, p
    ),
    _argmax_ref,
    _argmax_sample,
    diff_args=(0,),
    special=[(np.array([1.0, 3.0, 3.0, -np.inf]), np.arange(4, dtype=np.int32), (2,), (1,), _PAD)],
    n_ops=2,
)
