"""OpInfo entries: lax.conv_general_dilated and its wrappers, conv_general_dilated_patches and
_local, numpy.convolve/correlate, lax.associative_scan; references are direct float64 loops."""

from __future__ import annotations

import itertools

import numpy as np

import blu.numpy as bnp
from blu import lax
from ops.base import nonempty_shape, op, uniform


def _conv_ref(lhs, rhs, strides, padding, lhs_dil=None, dn=None, groups=1, rhs_dilation=None,
              preferred_element_type=None):  # fmt: skip
    """Cross-correlation by a loop over output positions and kernel taps (XLA's semantics)."""
    s = lhs.ndim - 2
    if dn is None:
        x, w = lhs, rhs
        out_perm = None
    else:  # strings: spatial axes ordered as in the kernel's string
        ls, rs, os_ = dn
        sp = [c for c in rs if c not in "OI"]
        x = lhs.transpose([ls.index(c) for c in "NC" + "".join(sp)])
        w = rhs.transpose([rs.index(c) for c in "OI" + "".join(sp)])
        out_perm = ["NC".index(c) if c in "NC" else 2 + sp.index(c) for c in os_]
    ld = lhs_dil or (1,) * s
    rd = rhs_dilation or (1,) * s
    win = w.shape[2:]
    eff = [(k - 1) * r + 1 if k else 0 for k, r in zip(win, rd)]
    if isinstance(padding, str):  # SAME: out = ceil(in / stride), odd pad on the high side
        pads = []
        for n, e, st in zip(x.shape[2:], eff, strides):
            tot = max((-(-n // st) - 1) * st + e - n, 0)
            pads.append((tot // 2, tot - tot // 2) if padding == "SAME" else (0, 0))
    else:
        pads = padding
    # dilate the input, then pad (negative pads crop)
    dshape = [(n - 1) * d + 1 if n else 0 for n, d in zip(x.shape[2:], ld)]
    xd = np.zeros(x.shape[:2] + tuple(dshape))
    xd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in ld)] = x
    for ax, (lo, hi) in enumerate(pads):
        a = ax + 2
        xd = np.concatenate(
            [np.zeros(xd.shape[:a] + (max(lo, 0),) + xd.shape[a + 1 :]), xd,
             np.zeros(xd.shape[:a] + (max(hi, 0),) + xd.shape[a + 1 :])], a,
        )  # fmt: skip
        sl = [slice(None)] * xd.ndim
        sl[a] = slice(max(-lo, 0), xd.shape[a] - max(-hi, 0))
        xd = xd[tuple(sl)]
    out_sp = [max((p - e) // st + 1, 0) for p, e, st in zip(xd.shape[2:], eff, strides)]
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    out = np.zeros((n, o, *out_sp))
    for oi in range(o):
        g = oi // og
        for y in itertools.product(*(range(m) for m in out_sp)):
            acc = np.zeros(n)
            for kk in itertools.product(*(range(k) for k in win)):
                idx = tuple(yy * st + k * r for yy, st, k, r in zip(y, strides, kk, rd))
                acc = (
                    acc
                    + xd[(slice(None), slice(g * cg, (g + 1) * cg)) + idx]
                    @ w[(oi, slice(None)) + kk]
                )
            out[(slice(None), oi) + y] = acc
    return out if out_perm is None else out.transpose(out_perm)


_LAYOUTS = {1: [None, ("NWC", "WIO", "NWC"), ("NCW", "OIW", "NWC")],
            2: [None, ("NHWC", "HWIO", "NHWC"), ("NCHW", "OIWH", "NHCW")]}  # fmt: skip


def _conv_sample(rng, s=None, general=True):
    """lhs, rhs, strides, padding, and (general) lhs_dilation, dimension_numbers, groups."""
    s = s or int(rng.integers(1, 3))
    g = int(rng.integers(1, 3)) if general else 1
    n, ci, co = int(rng.integers(1, 3)), g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    sp = [int(rng.integers(0 if rng.random() < 0.1 else 1, 6)) for _ in range(s)]
    win = [int(rng.integers(1, 4)) for _ in range(s)]
    strides = tuple(int(rng.integers(1, 3)) for _ in range(s))
    ld = tuple(int(rng.integers(1, 3)) for _ in range(s)) if general else None
    r = rng.random()
    if r < 0.3 and not (ld and max(ld) > 1):  # string padding: not with input dilation (JAX)
        padding = "SAME" if r < 0.2 else "VALID"
    else:
        padding = tuple((int(rng.integers(-1, 3)), int(rng.integers(-1, 3))) for _ in range(s))
    dn = _LAYOUTS[s][int(rng.integers(0, 3))] if general else None
    lhs = rng.standard_normal((n, ci, *sp))
    rhs = rng.standard_normal((co, ci // g, *win))
    if dn is not None:  # lay the operands out as dn says
        ls, rs, _ = dn
        spl = [c for c in rs if c not in "OI"]
        lhs = lhs.transpose(np.argsort([ls.index(c) for c in "NC" + "".join(spl)]))
        rhs = rhs.transpose(np.argsort([rs.index(c) for c in "OI" + "".join(spl)]))
    if not general:
        return lhs, rhs, strides, padding
    return lhs, rhs, strides, padding, ld, dn, g


def _tuple(d, lhs):
    return None if d is None else (d,) * (lhs.ndim - 2)


_CONV_SPECIAL = [  # empty output, a kernel wider than the input, inf/NaN in the input
    _conv_sample(np.random.default_rng(3), 2),
    (np.zeros((1, 1, 2)), np.ones((1, 1, 3)), (1,), "VALID", None, None, 1),
    (
        np.array([[[1.0, np.inf, 2.0, np.nan, 3.0, 4.0]]]),
        np.ones((1, 1, 2)),
        (2,),
        ((1, 1),),
        None,
        None,
        1,
    ),
]
op(
    "lax.conv_general_dilated",
    lambda lhs, rhs, st, pad, ld, dn, g, rhs_dilation=None, **kw: lax.conv_general_dilated(
        lhs, rhs, st, pad, ld, _tuple(rhs_dilation, lhs), dn, g, **kw
    ),
    lambda lhs, rhs, st, pad, ld, dn, g, rhs_dilation=None, **kw: _conv_ref(
        lhs, rhs, st, pad, ld, dn, g, _tuple(rhs_dilation, lhs)
    ),
    _conv_sample,
    covers=("lax.conv_general_dilated", "prim:conv_general_dilated"),
    special=_CONV_SPECIAL,
    kwargs=[{"rhs_dilation": 2}, {"preferred_element_type": np.float32}],
    n_ops=30,
)
op(
    "lax.conv",
    lambda lhs, rhs, st, pad, **kw: lax.conv(lhs, rhs, st, pad, **kw),
    lambda lhs, rhs, st, pad, **kw: _conv_ref(lhs, rhs, st, pad),
    lambda rng: _conv_sample(rng, general=False),
    kwargs=[{"preferred_element_type": np.float32}],
    n_ops=30,
)
op(
    "lax.conv_with_general_padding",
    lambda lhs, rhs, st, pad, ld, rd: lax.conv_with_general_padding(lhs, rhs, st, pad, ld, rd),
    lambda lhs, rhs, st, pad, ld, rd: _conv_ref(lhs, rhs, st, pad, ld, rhs_dilation=rd),
    lambda rng: (lambda a: a + (None, tuple(int(rng.integers(1, 3)) for _ in a[2])))(
        _conv_sample(rng, general=False)
    ),
    n_ops=30,
)


def _ct_ref(x, w, strides, padding, transpose_kernel=False):
    """A transposed convolution by its definition: each input element scatters the kernel,
    scaled, into the output at ``stride`` steps (NHC/HIO, VALID)."""
    k, a = w.shape[0], w.shape[1]
    if not transpose_kernel:  # the kernel as given is correlated: flip it and swap features
        w = np.swapaxes(w[::-1], 1, 2)
        a = w.shape[1]
    (s,) = strides
    out = np.zeros((x.shape[0], x.shape[1] * s + max(k - s, 0), a))
    for i, j in itertools.product(range(x.shape[1]), range(k)):
        out[:, i * s + j] += x[:, i] @ w[j].T
    return out


op(
    "lax.conv_transpose",
    lambda x, w, st, pad, **kw: lax.conv_transpose(x, w, st, pad, **kw),
    _ct_ref,
    lambda rng: (
        rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 5)), 2)),
        rng.standard_normal((int(rng.integers(1, 4)), 2, 2)),
        (int(rng.integers(1, 3)),),
        "VALID",
    ),
    kwargs=[{"transpose_kernel": True}],
    n_ops=12,
)

# ---- conv_general_dilated_patches / _local -------------------------------------------------------


def _patches_ref(x, fs, strides, padding, ld, dn, rhs_dilation=None, preferred_element_type=None):
    """Each window of the dilated, padded input cut out by a loop: feature ``c * S + p`` at
    window offset ``p`` (row-major over fs), laid out as ``dn``'s out string."""
    s = x.ndim - 2
    ls, rs, os_ = dn or ("NC" + "HW"[:s], "OI" + "HW"[:s], "NC" + "HW"[:s])
    sp = [c for c in rs if c not in "OI"]
    x = x.transpose([ls.index(c) for c in "NC" + "".join(sp)])
    rd = rhs_dilation if isinstance(rhs_dilation, tuple) else _tuple(rhs_dilation, x)
    ld, rd = ld or (1,) * s, rd or (1,) * s
    eff = [(k - 1) * r + 1 for k, r in zip(fs, rd)]
    if padding in ("SAME", "VALID"):  # SAME: out = ceil(in / stride), odd pad high
        tot = [max((-(-n // st) - 1) * st + e - n, 0) if padding == "SAME" else 0
               for n, e, st in zip(x.shape[2:], eff, strides)]  # fmt: skip
        padding = [(t // 2, t - t // 2) for t in tot]
    xd = np.zeros(x.shape[:2] + tuple((n - 1) * d + 1 if n else 0 for n, d in zip(x.shape[2:], ld)))
    xd[(slice(None), slice(None), *(slice(None, None, d) for d in ld))] = x
    for a, (lo, hi) in enumerate(padding, start=2):
        xd = np.take(xd, range(max(-lo, 0), xd.shape[a] - max(-hi, 0)), axis=a)
        xd = np.pad(xd, [(0, 0)] * a + [(max(lo, 0), max(hi, 0))] + [(0, 0)] * (xd.ndim - a - 1))
    out_sp = [max((p - e) // st + 1, 0) for p, e, st in zip(xd.shape[2:], eff, strides)]
    offsets = list(itertools.product(*(range(k) for k in fs)))
    out = np.zeros((x.shape[0], x.shape[1] * len(offsets), *out_sp))
    for (c, (p, k)), y in itertools.product(
        itertools.product(range(x.shape[1]), enumerate(offsets)),
        itertools.product(*(range(m) for m in out_sp)),
    ):
        idx = tuple(yy * st + kk * r for yy, st, kk, r in zip(y, strides, k, rd))
        out[(slice(None), c * len(offsets) + p, *y)] = xd[(slice(None), c, *idx)]
    return out.transpose(["NC".index(c) if c in "NC" else 2 + sp.index(c) for c in os_])


def _patches_sample(rng):
    """lhs, filter_shape (in the kernel string's spatial order), strides, padding, lhs
    dilation, layout."""
    lhs, rhs, st, pad, ld, dn, _ = _conv_sample(rng)
    rs = dn[1] if dn else "OI" + "HW"[: lhs.ndim - 2]
    return lhs, tuple(rhs.shape[i] for i, c in enumerate(rs) if c not in "OI"), st, pad, ld, dn


op(
    "lax.conv_general_dilated_patches",
    lambda x, fs, st, pad, ld, dn, rhs_dilation=None, **kw: lax.conv_general_dilated_patches(
        x, fs, st, pad, ld, _tuple(rhs_dilation, x), dn, **kw
    ),
    _patches_ref,
    _patches_sample,
    special=[  # size-1 axes; a window wider than the input (an empty output)
        (np.full((1, 1, 1, 1), 2.0), (1, 1), (1, 1), "VALID", None, None),
        (np.ones((2, 1, 2)), (3,), (1,), "VALID", None, None),
    ],
    kwargs=[{"rhs_dilation": 2}, {"preferred_element_type": np.float32}],
    n_ops=2,
)


def _local_sample(rng):
    """lhs, rhs (O, C * prod(fs) and the output's sizes, in the kernel string's layout),
    strides, padding, filter_shape, lhs and rhs dilations, layout."""
    x, fs, st, pad, ld, dn = _patches_sample(rng)
    rd = tuple(int(rng.integers(1, 3)) for _ in fs)
    p = _patches_ref(x, fs, st, pad, ld, dn, rd)
    s = x.ndim - 2
    rs, os_ = (dn[1], dn[2]) if dn else ("OI" + "HW"[:s], "NC" + "HW"[:s])
    size = {"O": int(rng.integers(1, 3)), "I": p.shape[os_.index("C")]}
    size.update({c: p.shape[os_.index(c)] for c in rs if c not in "OI"})
    return x, rng.standard_normal([size[c] for c in rs]), st, pad, fs, ld, rd, dn


def _local_ref(x, w, st, pad, fs, ld, rd, dn):
    """The patches' loop, then per output position a product with that position's kernel."""
    s = x.ndim - 2
    _, rs, os_ = dn or ("NC" + "HW"[:s], "OI" + "HW"[:s], "NC" + "HW"[:s])
    sp = "".join(c for c in rs if c not in "OI")
    p = _patches_ref(x, fs, st, pad, ld, dn, rd).transpose([os_.index(c) for c in "NC" + sp])
    out = np.einsum("ni...,oi...->no...", p, w.transpose([rs.index(c) for c in "OI" + sp]))
    return out.transpose(["NC".index(c) if c in "NC" else 2 + sp.index(c) for c in os_])


op(
    "lax.conv_general_dilated_local",
    lambda x, w, st, pad, fs, ld, rd, dn: lax.conv_general_dilated_local(
        x, w, st, pad, fs, ld, rd, dn
    ),
    _local_ref,
    _local_sample,
    special=[
        (
            np.full((1, 1, 1, 1), 2.0),
            np.full((1, 1, 1, 1), 3.0),
            (1, 1),
            "VALID",
            (1, 1),
            None,
            None,
            None,
        )
    ],  # fmt: skip
    n_ops=30,
)


# ---- numpy.convolve / correlate -----------------------------------------------------------------


def _pair(rng):
    return tuple(uniform()(rng, (int(rng.integers(1, 7)),)) for _ in range(2))


_SIG_SPECIAL = [
    (np.array([2.0]), np.array([3.0])),
    (np.array([1.0, 2.0]), np.array([1.0, -1.0, 0.5, 4.0, 2.0])),  # the second longer
    (np.array([1.0, np.inf, 3.0, 0.0]), np.array([0.5, 2.0, 1.0])),
]
for _n in ("convolve", "correlate"):
    op(
        f"numpy.{_n}",
        (lambda f: lambda a, v, **kw: f(a, v, **kw))(getattr(bnp, _n)),
        (lambda f: lambda a, v, preferred_element_type=None, **kw: f(a, v, **kw))(getattr(np, _n)),
        _pair,
        special=_SIG_SPECIAL,
        kwargs=[
            {"mode": "same"},
            {"mode": "valid" if _n == "convolve" else "full"},
            {"preferred_element_type": np.float32},
        ],
        n_ops=10,
    )

# ---- associative_scan ---------------------------------------------------------------------------


def _affine(a, b):
    """(a1, b1) then (a2, b2) of h -> a h + b: the linear recurrence h_i = a_i h_{i-1} + b_i,
    associative but not commutative."""
    return a[0] * b[0], b[0] * a[1] + b[1]


def _affine_ref(a, b, reverse=False, axis=0):
    a, b = np.moveaxis(a, axis, 0), np.moveaxis(b, axis, 0)
    if reverse:
        a, b = a[::-1], b[::-1]
    pa, h = np.ones(a.shape[1:]), np.zeros(a.shape[1:])
    outa, outb = [], []
    for ai, bi in zip(a, b):  # a Python loop over the scanned axis
        pa, h = pa * ai, ai * h + bi
        outa.append(pa)
        outb.append(h)
    outa = np.array(outa).reshape(a.shape)
    outb = np.array(outb).reshape(b.shape)
    if reverse:
        outa, outb = outa[::-1], outb[::-1]
    return np.moveaxis(outa, 0, axis), np.moveaxis(outb, 0, axis)


def _scan_sample(rng):
    shape = (int(rng.choice([0, 1, 2, 3, 5, 8])),) + nonempty_shape(rng, 1, 1, 3)
    return uniform(0.5, 1.2)(rng, shape), uniform()(rng, shape)


op(
    "lax.associative_scan",
    lambda a, b, **kw: lax.associative_scan(_affine, (a, b), **kw),
    _affine_ref,
    _scan_sample,
    special=[
        (np.ones((7, 2)), np.array([[1.0, np.inf]] * 3 + [[np.nan, 0.0]] + [[2.0, 3.0]] * 3)),
        (np.full((1, 3), 2.0), np.zeros((1, 3))),
    ],
    kwargs=[{"reverse": True}, {"axis": 1}, {"axis": -1, "reverse": True}],
    n_ops=20,
)
op(
    "lax.associative_scan(add)",  # cumsum, every length's odd/even recursion
    lambda x, **kw: lax.associative_scan(lax.add, x, **kw),
    lambda x, reverse=False, axis=0: (
        np.flip(np.cumsum(np.flip(x, axis), axis), axis) if reverse else np.cumsum(x, axis)
    ),
    lambda rng: (uniform()(rng, (int(rng.integers(0, 12)), 2)),),
    covers=("lax.associative_scan",),
    special=[(np.arange(13.0)[:, None],), (np.array([[1.0], [np.inf], [-np.inf], [2.0]]),)],
    kwargs=[{"reverse": True}],
    n_ops=20,
)
