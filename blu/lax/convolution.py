"""``conv_general_dilated`` as one primitive (XLA's ConvGeneralDilated, ``jax.lax``'s
signature), with its shape rule, JVP (bilinear), transposes and batching rule.

In ``(N, C, spatial...)`` / ``(O, I, window...)`` layout the primitive computes::

    lhs' = pad(lhs, 0, [(lo, hi, lhs_dilation - 1) per spatial axis])      # dilate and pad
    out[n, o, y] = sum_{c, k} lhs'[n, g(o) * C/G + c, y * stride + k * rhs_dilation]
                              * rhs[o, c, k]                                # cross-correlation

with ``G = feature_group_count`` and ``g(o)`` the group of output feature ``o``; with
``B = batch_group_count`` the batch splits into ``B`` blocks and output feature ``o`` reads block
``b(o)`` (``out`` has batch ``N / B``), as XLA. The transposes are convolutions again, after
JAX's ``jax/_src/lax/convolution.py``: to the lhs, the cotangent convolved with the flipped
kernel (``lhs_dilation = window_strides``); to the rhs, the lhs convolved with the cotangent,
feature groups becoming batch groups and back. vmap folds the mapped axis into the batch (lhs)
or into the output features with groups (rhs).

The eager impl is a direct convolution in numpy (``conv_numpy.py``: one padded copy of the
input, a BLAS product per kernel offset), which is also the CPU's library node
(``blu/lower/cpu/libraries.py``); targets without a kernel inline the decomposition
(``conv_decomp.py``: im2col, a strided slice per kernel offset and one ``dot_general``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.conv_args import as_int, int_tuple, pad_pairs, padtype_to_pads
from blu.lax.conv_decomp import conv_im2col
from blu.lax.conv_numpy import conv_numpy, dilate_dim
from blu.lax.dot import _canonical_precision
from blu.lax.elementwise import convert_element_type
from blu.lax.shapes import full, reshape, rev, transpose
from blu.transforms.ad_util import Zero, add_tangents, is_undefined, tangent_aval

__all__ = [
    "ConvDimensionNumbers",
    "conv",
    "conv_dimension_numbers",
    "conv_general_dilated",
    "conv_transpose",
    "conv_with_general_padding",
    "padtype_to_pads",
]


class ConvDimensionNumbers(NamedTuple):
    """Where each role sits in the operands: ``lhs_spec = (batch, feature, spatial...)``,
    ``rhs_spec = (out feature, in feature, spatial...)``, ``out_spec = (batch, feature,
    spatial...)``, each a tuple of axis indices (as ``jax.lax.ConvDimensionNumbers``)."""

    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]


def conv_dimension_numbers(
    lhs_shape: Sequence[int], rhs_shape: Sequence[int], dimension_numbers: Any
) -> ConvDimensionNumbers:
    """Normalize ``dimension_numbers`` to a ``ConvDimensionNumbers``.

    Args:
        lhs_shape, rhs_shape: the operands' shapes (same rank ``2 + s``).
        dimension_numbers: None (``NCHW``/``OIHW``/``NCHW`` order: axis indices in order), a
            ``ConvDimensionNumbers``, or three strings such as ``("NHWC", "HWIO", "NHWC")``
            (``N`` batch, ``C`` feature, ``O``/``I`` kernel out/in feature, other letters
            spatial; the spatial axes are ordered as in the kernel's string).

    Raises:
        BluValueError: ranks differ, or the strings do not name the same axes.
    """
    nd = len(lhs_shape)
    if len(rhs_shape) != nd or nd < 2:
        raise BluShapeError(
            with_user_line(
                f"conv: lhs {tuple(lhs_shape)} and rhs {tuple(rhs_shape)} need the same rank >= 2"
            )
        )
    if dimension_numbers is None:
        iota = tuple(range(nd))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    try:
        lhs_s, rhs_s, out_s = dimension_numbers
    except (TypeError, ValueError) as e:
        raise BluValueError(
            with_user_line(f"conv: bad dimension_numbers {dimension_numbers!r}")
        ) from e
    if not all(isinstance(s, str) for s in (lhs_s, rhs_s, out_s)):
        return ConvDimensionNumbers(*(tuple(int(i) for i in s) for s in (lhs_s, rhs_s, out_s)))
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for spec, pair in zip((lhs_s, rhs_s, out_s), pairs):
        if len(spec) != nd or not set(pair) <= set(spec) or len(set(spec)) != nd:
            raise BluValueError(
                with_user_line(
                    f"conv: dimension_numbers {dimension_numbers!r}: {spec!r} must have {nd} "
                    f"distinct letters including {pair[0]!r} and {pair[1]!r}"
                )
            )
    spatial = set(rhs_s) - {"O", "I"}
    if not set(lhs_s) - {"N", "C"} == spatial == set(out_s) - {"N", "C"}:
        raise BluValueError(
            with_user_line(
                f"conv: dimension_numbers {dimension_numbers!r} name different spatial axes"
            )
        )

    def perm(spec: str, pair: tuple[str, str]) -> tuple[int, ...]:
        sp = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs_s:
            sp.sort(key=lambda i: rhs_s.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1]), *sp)

    return ConvDimensionNumbers(perm(lhs_s, pairs[0]), perm(rhs_s, pairs[1]), perm(out_s, pairs[2]))


# ---- the primitive ---------------------------------------------------------------------------

conv_general_dilated_p = Primitive("conv_general_dilated")
conv_general_dilated_p.def_impl(conv_numpy)
conv_general_dilated_p.decomposition = conv_im2col


@conv_general_dilated_p.def_abstract_eval
def _conv_abstract_eval(
    lhs: ShapedArray,
    rhs: ShapedArray,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    precision,
    preferred_element_type,
) -> ShapedArray:
    where = f"conv_general_dilated: lhs {lhs.str_short()} and rhs {rhs.str_short()}"
    if lhs.ndim != rhs.ndim or lhs.ndim < 2:
        raise BluShapeError(with_user_line(f"{where} need the same rank >= 2"))
    if lhs.dtype != rhs.dtype:
        raise BluTypeError(with_user_line(f"{where} must have the same dtype"))
    out_dt = preferred_element_type or lhs.dtype
    if dtypes.is_inexact(lhs.dtype) and not dtypes.is_inexact(out_dt):
        raise BluTypeError(
            with_user_line(f"{where}: preferred_element_type {out_dt} cannot hold their product")
        )
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    n, c = lhs.shape[lhs_spec[0]], lhs.shape[lhs_spec[1]]
    o, i = rhs.shape[rhs_spec[0]], rhs.shape[rhs_spec[1]]
    fg, bg = feature_group_count, batch_group_count
    if fg < 1 or bg < 1 or (fg > 1 and bg > 1):
        raise BluValueError(
            with_user_line(
                f"{where}: feature_group_count={fg} and batch_group_count={bg} must be >= 1, "
                "at most one of them > 1"
            )
        )
    if c % fg or c // fg != i or o % fg:
        raise BluValueError(
            with_user_line(
                f"{where}: lhs has C={c} features and rhs O={o} out / I={i} in features; "
                f"feature_group_count={fg} needs C = G * I and O divisible by G"
            )
        )
    if n % bg or o % bg:
        raise BluValueError(
            with_user_line(
                f"{where}: batch_group_count={bg} must divide the lhs batch N={n} and the rhs "
                f"out features O={o}"
            )
        )
    sp = []
    for ax, (la, ra, (lo, hi), st, ld, rd) in enumerate(
        zip(lhs_spec[2:], rhs_spec[2:], padding, window_strides, lhs_dilation, rhs_dilation)
    ):
        padded = dilate_dim(lhs.shape[la], ld) + lo + hi
        if padded < 0:
            raise BluValueError(
                with_user_line(f"{where}: padding {(lo, hi)} crops spatial axis {ax} below 0")
            )
        eff = dilate_dim(rhs.shape[ra], rd)
        sp.append((padded - eff) // st + 1 if padded >= eff else 0)
    canonical = (n // bg, o, *sp)
    shape = [0] * lhs.ndim
    for j, axis in enumerate(out_spec):
        shape[axis] = canonical[j]
    return ShapedArray(tuple(shape), out_dt)


def _bind(lhs: Any, rhs: Any, **params: Any) -> Any:
    return conv_general_dilated_p.bind(lhs, rhs, **params)


@conv_general_dilated_p.def_jvp
def _conv_jvp(primals, tangents, **params):
    (lhs, rhs), (t_lhs, t_rhs) = primals, tangents
    out = _bind(lhs, rhs, **params)
    t_out: Any = Zero(tangent_aval(get_aval(out)))
    if not dtypes.is_inexact(get_aval(out).dtype):
        return out, t_out
    if not isinstance(t_lhs, Zero):
        t_out = add_tangents(t_out, _bind(t_lhs, rhs, **params))
    if not isinstance(t_rhs, Zero):
        t_out = add_tangents(t_out, _bind(lhs, t_rhs, **params))
    return out, t_out


def _reshape_axis_into(src: int, dst: int, x: Any) -> Any:
    """Merge axis ``src`` into axis ``dst`` (numbered without ``src``), ``src`` major."""
    shape = get_aval(x).shape
    perm = [a for a in range(len(shape)) if a != src]
    perm.insert(dst, src)
    new = [d for a, d in enumerate(shape) if a != src]
    new[dst] *= shape[src]
    return reshape(transpose(x, perm), new)


def _reshape_axis_out_of(src: int, size1: int, x: Any) -> Any:
    """Split axis ``src`` into ``(size1, rest)``."""
    shape = list(get_aval(x).shape)
    shape[src : src + 1] = [size1, shape[src] // size1]
    return reshape(x, shape)


def vjp_lhs_padding(in_sp, win, strides, out_sp, padding, ld, rd) -> tuple:
    """The padding of the convolution that transposes one to its lhs (JAX's
    ``_conv_general_vjp_lhs_padding``; reduce_window_sum's transpose too)."""
    pads = []
    for n, k, st, m, (lo, _), l_, r in zip(in_sp, win, strides, out_sp, padding, ld, rd):
        before = dilate_dim(k, r) - lo - 1
        after = dilate_dim(n, l_) + dilate_dim(k, r) - 1 - dilate_dim(m, st) - before
        pads.append((before, after))
    return tuple(pads)


def _vjp_rhs_padding(in_sp, win, strides, out_sp, padding, ld, rd) -> tuple:
    """The rhs transpose's padding (JAX's ``_conv_general_vjp_rhs_padding``)."""
    pads = []
    for n, k, st, m, (lo, _), l_, r in zip(in_sp, win, strides, out_sp, padding, ld, rd):
        hi = dilate_dim(m, st) - dilate_dim(n, l_) + dilate_dim(k, r) - lo - 1
        pads.append((lo, hi))
    return tuple(pads)


def _spatial(shape, spec) -> list[int]:
    return [shape[a] for a in spec[2:]]


def _transpose_lhs(ct, lhs_aval, rhs, params) -> Any:
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    rhs_shape = get_aval(rhs).shape
    if fg > 1 or bg > 1:  # the group axis moves from the kernel's out to its in features
        rhs = _reshape_axis_out_of(rhs_spec[0], max(fg, bg), rhs)
        rhs = _reshape_axis_into(rhs_spec[0], rhs_spec[1], rhs)
    pads = vjp_lhs_padding(
        _spatial(lhs_aval.shape, lhs_spec), _spatial(rhs_shape, rhs_spec),
        params["window_strides"], _spatial(get_aval(ct).shape, out_spec), params["padding"],
        params["lhs_dilation"], params["rhs_dilation"],
    )  # fmt: skip
    t_rhs_spec = (rhs_spec[1], rhs_spec[0], *rhs_spec[2:])
    out = _bind(
        convert_element_type(ct, get_aval(rhs).dtype), rev(rhs, rhs_spec[2:]),
        window_strides=params["lhs_dilation"], padding=pads,
        lhs_dilation=params["window_strides"], rhs_dilation=params["rhs_dilation"],
        dimension_numbers=ConvDimensionNumbers(out_spec, t_rhs_spec, lhs_spec),
        feature_group_count=max(fg, bg), batch_group_count=1,
        precision=params["precision"], preferred_element_type=params["preferred_element_type"],
    )  # fmt: skip
    if bg > 1:  # the batch groups come back out of the features
        out = _reshape_axis_out_of(lhs_spec[1], bg, out)
        out = _reshape_axis_into(lhs_spec[1], lhs_spec[0], out)
    return convert_element_type(out, lhs_aval.dtype)


def _transpose_rhs(ct, lhs, rhs_aval, params) -> Any:
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    pads = _vjp_rhs_padding(
        _spatial(get_aval(lhs).shape, lhs_spec), _spatial(rhs_aval.shape, rhs_spec),
        params["window_strides"], _spatial(get_aval(ct).shape, out_spec), params["padding"],
        params["lhs_dilation"], params["rhs_dilation"],
    )  # fmt: skip
    swap = lambda spec: (spec[1], spec[0], *spec[2:])  # noqa: E731
    out = _bind(
        lhs, convert_element_type(ct, get_aval(lhs).dtype),
        window_strides=params["rhs_dilation"], padding=pads,
        lhs_dilation=params["lhs_dilation"], rhs_dilation=params["window_strides"],
        dimension_numbers=ConvDimensionNumbers(swap(lhs_spec), swap(out_spec), swap(rhs_spec)),
        feature_group_count=bg, batch_group_count=fg,  # the groups swap roles
        precision=params["precision"], preferred_element_type=params["preferred_element_type"],
    )  # fmt: skip
    return convert_element_type(out, rhs_aval.dtype)


@conv_general_dilated_p.def_transpose
def _conv_transpose(ct, lhs, rhs, **params):
    if isinstance(ct, Zero):
        return [None, None]
    if is_undefined(lhs) and is_undefined(rhs):
        raise NotImplementedError("conv_general_dilated is bilinear, not linear in both operands")
    if is_undefined(lhs):
        if get_aval(ct).size == 0:  # nothing flows back: zeros (a degenerate convolution)
            return [full(lhs.aval.shape, 0, lhs.aval.dtype), None]
        return [_transpose_lhs(ct, lhs.aval, rhs, params), None]
    if get_aval(ct).size == 0:
        return [None, full(rhs.aval.shape, 0, rhs.aval.dtype)]
    return [None, _transpose_rhs(ct, lhs, rhs.aval, params)]


@conv_general_dilated_p.def_batch
def _conv_batch(axis_size, args, dims, **params):
    """Fold the mapped axis into the batch (lhs), the output features (rhs), or both with
    feature groups (JAX's ``_conv_general_dilated_batch_rule``)."""
    (lhs, rhs), (ld, rd) = args, dims
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    if axis_size == 0:  # nothing to fold (a size-0 axis cannot be split back out): zeros
        la, ra = get_aval(lhs), get_aval(rhs)
        one = [ShapedArray(tuple(d for i, d in enumerate(a.shape) if i != b), a.dtype)
               if b is not None else a for a, b in ((la, ld), (ra, rd))]  # fmt: skip
        aval = _conv_abstract_eval(*one, **params)
        return full((0, *aval.shape), 0, aval.dtype), 0
    if ld is not None and rd is not None:
        if bg > 1:
            new_lhs = _reshape_axis_into(ld, lhs_spec[0], lhs)
            params = dict(params, batch_group_count=bg * axis_size)
        else:
            new_lhs = _reshape_axis_into(ld, lhs_spec[1], lhs)
            params = dict(params, feature_group_count=fg * axis_size)
        out = _bind(new_lhs, _reshape_axis_into(rd, rhs_spec[0], rhs), **params)
        return _reshape_axis_out_of(out_spec[1], axis_size, out), out_spec[1]
    if ld is not None:
        if bg == 1:
            out = _bind(_reshape_axis_into(ld, lhs_spec[0], lhs), rhs, **params)
        else:  # the mapped axis goes inside each batch group
            x = _reshape_axis_out_of(lhs_spec[0] + int(ld <= lhs_spec[0]), bg, lhs)
            x = _reshape_axis_into(ld + int(lhs_spec[0] < ld), lhs_spec[0] + 1, x)
            x = _reshape_axis_into(lhs_spec[0], lhs_spec[0], x)
            out = _bind(x, rhs, **params)
        return _reshape_axis_out_of(out_spec[0], axis_size, out), out_spec[0]
    if fg == 1 and bg == 1:
        out = _bind(lhs, _reshape_axis_into(rd, rhs_spec[0], rhs), **params)
        return _reshape_axis_out_of(out_spec[1], axis_size, out), out_spec[1]
    # groups stay outermost in the out features: the mapped axis goes inside each group
    groups = max(fg, bg)
    w = _reshape_axis_out_of(rhs_spec[0] + int(rd <= rhs_spec[0]), groups, rhs)
    w = _reshape_axis_into(rd + int(rhs_spec[0] < rd), rhs_spec[0] + 1, w)
    w = _reshape_axis_into(rhs_spec[0], rhs_spec[0], w)
    out = _bind(lhs, w, **params)
    out = _reshape_axis_out_of(out_spec[1], groups, out)
    out = _reshape_axis_out_of(out_spec[1] + 1, axis_size, out)
    return _reshape_axis_into(out_spec[1], out_spec[1] + 1, out), out_spec[1]


# ---- the lax functions -----------------------------------------------------------------------


def conv_general_dilated(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """General n-d convolution (cross-correlation, as XLA and ``jax.lax``), with strides,
    padding, input ("transposed convolution") and kernel ("atrous") dilation and groups.

    Args:
        lhs: input, rank ``2 + s``: batch ``N``, features ``C`` and ``s`` spatial axes in the
            layout of ``dimension_numbers``.
        rhs: kernel, rank ``2 + s``: out features ``O``, in features ``C / G``, spatial window;
            the same dtype as ``lhs``.
        window_strides: ``s`` ints >= 1.
        padding: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` or ``s`` pairs ``(low, high)``
            (negative values crop), applied after ``lhs_dilation``.
        lhs_dilation: ``s`` ints >= 1: ``d - 1`` zeros between input elements (default 1).
        rhs_dilation: ``s`` ints >= 1: ``d - 1`` gaps between kernel taps (default 1).
        dimension_numbers: the layouts (see ``conv_dimension_numbers``), e.g.
            ``("NHWC", "HWIO", "NHWC")``; None is ``NCHW``/``OIHW``/``NCHW``.
        feature_group_count: ``G``: ``C`` and ``O`` split into ``G`` groups, group ``g`` of the
            output seeing group ``g`` of the input (``G = C`` is a depthwise convolution).
        batch_group_count: ``B``: the batch ``N`` and ``O`` split into ``B`` blocks, output
            features of block ``b`` reading batch block ``b`` (the output batch is ``N / B``;
            the kernel gradient of a grouped convolution); at most one group count > 1.
        precision, preferred_element_type: as ``dot_general``'s (the output dtype).

    Returns:
        An array in ``out_spec`` layout with batch ``N / B``, ``O`` features and spatial sizes
        ``floor((dilated_in + lo + hi - dilated_window) / stride) + 1`` (0 if negative).

    Raises:
        BluTypeError: lhs and rhs dtypes differ (as ``dot_general``); strides, dilations, pads
            or group counts that are not ints (1.5 is not truncated).
        BluShapeError: ranks that differ.
        BluValueError: feature/batch sizes that do not match the group counts, bad
            strides/dilations/padding/dimension numbers.
    """
    la, ra = get_aval(lhs), get_aval(rhs)
    dn = conv_dimension_numbers(la.shape, ra.shape, dimension_numbers)
    s = la.ndim - 2
    where = "conv_general_dilated"
    strides = int_tuple(window_strides, s, "window_strides", 1)
    ld = int_tuple(lhs_dilation, s, "lhs_dilation", 1)
    rd = int_tuple(rhs_dilation, s, "rhs_dilation", 1)
    if isinstance(padding, str):
        in_sp = [la.shape[a] for a in dn.lhs_spec[2:]]
        eff_win = [dilate_dim(ra.shape[a], r) for a, r in zip(dn.rhs_spec[2:], rd)]
        pads = tuple(padtype_to_pads(in_sp, eff_win, strides, padding))
    else:
        pads = pad_pairs(padding, s, "conv")
    pet = None if preferred_element_type is None else dtypes.canonicalize(preferred_element_type)
    return conv_general_dilated_p.bind(
        lhs, rhs, window_strides=strides, padding=pads, lhs_dilation=ld, rhs_dilation=rd,
        dimension_numbers=ConvDimensionNumbers(*(tuple(int(a) for a in sp) for sp in dn)),
        feature_group_count=as_int(feature_group_count, "feature_group_count", where),
        batch_group_count=as_int(batch_group_count, "batch_group_count", where),
        precision=_canonical_precision(precision), preferred_element_type=pet,
    )  # fmt: skip


def conv_with_general_padding(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: Any,
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """``conv_general_dilated`` in ``NCHW``/``OIHW`` layout (``jax.lax``'s name)."""
    return conv_general_dilated(
        lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
        precision=precision, preferred_element_type=preferred_element_type,
    )  # fmt: skip


def conv(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """``conv_general_dilated`` in ``NCHW``/``OIHW`` layout without dilation (``jax.lax.conv``)."""
    return conv_general_dilated(
        lhs, rhs, window_strides, padding,
        precision=precision, preferred_element_type=preferred_element_type,
    )  # fmt: skip


def _transpose_pads(k: int, s: int, padding: Any) -> tuple[int, int]:
    """One axis's padding of a transposed convolution (JAX's ``_conv_transpose_padding``):
    for ``"SAME"``/``"VALID"``/a forward pair, the padding that makes it the gradient of the
    forward convolution (Keras's output sizes ``n * s`` and ``n * s + max(k - s, 0)``)."""
    if padding == "SAME":
        total = k + s - 2
        lo = k - 1 if s > k - 1 else -(-total // 2)
    elif padding == "VALID":
        total, lo = k + s - 2 + max(k - s, 0), k - 1
    else:
        lo, total = k - padding[0] - 1, 2 * k - padding[0] - padding[1] - 2
    return lo, total - lo


_TRANSPOSE_LAYOUTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"),
                      4: ("NHWC", "HWIO", "NHWC"), 5: ("NHWDC", "HWDIO", "NHWDC")}  # fmt: skip


def conv_transpose(
    lhs: Any,
    rhs: Any,
    strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    transpose_kernel: bool = False,
    precision: Any = None,
    preferred_element_type: Any = None,
    use_consistent_padding: bool = False,
) -> Any:
    """A transposed ("fractionally strided") convolution, ``jax.lax.conv_transpose``: the
    input dilated by ``strides`` and convolved with stride 1.

    Args:
        lhs, rhs: as ``conv_general_dilated``'s; the default layouts are TensorFlow's
            (``NHWC``/``HWIO``/``NHWC`` for rank 4, and the like for ranks 2 to 5).
        strides: ``s`` ints >= 1: the forward convolution's strides.
        padding: ``"SAME"`` (output ``n * stride``), ``"VALID"`` (``n * stride +
            max(k - stride, 0)``), or ``s`` pairs: the transposed convolution's own padding,
            or with ``use_consistent_padding`` the forward convolution's (PyTorch's meaning).
        rhs_dilation: ``s`` ints >= 1 (the kernel's dilation).
        dimension_numbers: as ``conv_general_dilated``'s.
        transpose_kernel: flip the kernel's spatial axes and swap its in/out features, so the
            result is the gradient of ``conv_general_dilated`` with this kernel (Keras's
            ``Conv2DTranspose``).
        precision, preferred_element_type: as ``conv_general_dilated``'s.
        use_consistent_padding: read padding pairs as the forward convolution's.

    Raises:
        BluValueError: no default layout for the rank, or the errors of
            ``conv_general_dilated``.
    """
    la, ra = get_aval(lhs), get_aval(rhs)
    if dimension_numbers is None:
        if la.ndim not in _TRANSPOSE_LAYOUTS:
            raise BluValueError(
                with_user_line(f"conv_transpose: no default layout for rank {la.ndim}")
            )
        dimension_numbers = _TRANSPOSE_LAYOUTS[la.ndim]
    dn = conv_dimension_numbers(la.shape, ra.shape, dimension_numbers)
    s = la.ndim - 2
    strides = int_tuple(strides, s, "strides", 1)
    rd = int_tuple(rhs_dilation, s, "rhs_dilation", 1)
    if isinstance(padding, str) or use_consistent_padding:
        eff = [dilate_dim(ra.shape[a], r) for a, r in zip(dn.rhs_spec[2:], rd)]
        per_axis = [padding.upper()] * s if isinstance(padding, str) else list(padding)
        if len(per_axis) != s or not all(
            p in ("SAME", "VALID") or (not isinstance(p, str) and len(p) == 2) for p in per_axis
        ):
            raise BluValueError(
                with_user_line(
                    f"conv_transpose: padding must be 'SAME', 'VALID' or {s} pairs, got {padding!r}"
                )
            )
        pads = [_transpose_pads(k, st, p) for k, st, p in zip(eff, strides, per_axis)]
    else:
        pads = padding
    if transpose_kernel:  # flip the window, swap the kernel's in and out features
        rhs = rev(rhs, dn.rhs_spec[2:])
        perm = list(range(ra.ndim))
        perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = dn.rhs_spec[1], dn.rhs_spec[0]
        rhs = transpose(rhs, perm)
    return conv_general_dilated(
        lhs, rhs, (1,) * s, pads, strides, rd, dn,
        precision=precision, preferred_element_type=preferred_element_type,
    )  # fmt: skip
