"""The convolution's shape arithmetic (``jax.lax``'s names): the layout permutations of string
dimension numbers and the output shapes of ``conv_general_dilated`` and ``conv_transpose``, on
shapes alone (no array computation), and the window-argument checks that the patch helpers
(``conv_patches.py``) share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.lax.conv_args import as_int, int_tuple, pad_pairs, padtype_to_pads
from blu.lax.conv_numpy import dilate_dim
from blu.lax.convolution import ConvDimensionNumbers, _transpose_pads, conv_dimension_numbers

__all__ = [
    "ConvGeneralDilatedDimensionNumbers",
    "conv_general_permutations",
    "conv_general_shape_tuple",
    "conv_shape_tuple",
    "conv_transpose_shape_tuple",
]

#: What the ``dimension_numbers`` of the conv functions may be (``jax.lax``'s type alias).
ConvGeneralDilatedDimensionNumbers = tuple[str, str, str] | ConvDimensionNumbers | None

_PAD_STRINGS = ("SAME", "SAME_LOWER", "VALID")


def shape_tuple(shape: Any, what: str, name: str) -> tuple[int, ...]:
    """``shape`` as a tuple of ints >= 0.

    Raises:
        BluTypeError: not a sequence of ints; BluValueError: a negative size.
    """
    try:
        out = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise BluTypeError(
            with_user_line(f"{what}: {name} must be a sequence of ints, got {shape!r}")
        ) from None
    if any(d < 0 for d in out):
        raise BluValueError(with_user_line(f"{what}: {name} {out} has a negative size"))
    return out


def check_padding(padding: Any, n: int, where: str, allowed: Sequence[str] = _PAD_STRINGS) -> Any:
    """A padding string (upper-cased) checked against ``allowed``, or ``n`` (low, high) pairs.

    Raises:
        BluValueError: an unknown string or not ``n`` pairs; BluTypeError: pairs of non-ints.
    """
    if isinstance(padding, str):
        if padding.upper() not in allowed:
            raise BluValueError(
                with_user_line(
                    f"{where}: padding must be one of {', '.join(map(repr, allowed))} or {n} "
                    f"(low, high) pairs, got {padding!r}"
                )
            )
        return padding.upper()
    return pad_pairs(padding, n, where)


def check_cropping(in_sp, dilation, pads, where: str) -> None:
    """Negative pads may crop an axis to 0 elements, no further.

    Raises:
        BluValueError: naming the axis, its (dilated) size and its pads.
    """
    for ax, (n, d, (lo, hi)) in enumerate(zip(in_sp, dilation, pads)):
        if dilate_dim(n, d) + lo + hi < 0:
            raise BluValueError(
                with_user_line(
                    f"{where}: padding {(lo, hi)} crops spatial axis {ax} (size "
                    f"{dilate_dim(n, d)}) below 0"
                )
            )


def conv_general_permutations(dimension_numbers: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """The axis permutations of string dimension numbers (``jax.lax.conv_general_permutations``).

    Args:
        dimension_numbers: three strings ``(lhs_spec, rhs_spec, out_spec)`` of one length
            ``2 + s``, e.g. ``("NHWC", "HWIO", "NHWC")``: ``N``/``C`` the batch and feature axes
            of the input and output, ``O``/``I`` the kernel's out and in features, other
            letters the spatial axes.

    Returns:
        ``(lhs_perm, rhs_perm, out_perm)``, tuples of axis indices in the order (batch,
        feature, spatial...) / (out feature, in feature, spatial...), the spatial axes in the
        order of the kernel's string (the fields of ``ConvDimensionNumbers``).

    Raises:
        BluTypeError: not three strings. BluValueError: strings of different lengths, without
            their two role letters once each, repeating a letter, or naming different spatial
            axes.
    """
    try:
        lhs_s, rhs_s, out_s = dimension_numbers
    except (TypeError, ValueError):
        raise BluTypeError(
            with_user_line(
                f"conv_general_permutations: dimension_numbers must be three strings, got "
                f"{dimension_numbers!r}"
            )
        ) from None
    if not all(isinstance(s, str) for s in (lhs_s, rhs_s, out_s)):
        raise BluTypeError(
            with_user_line(
                f"conv_general_permutations: dimension_numbers must be three strings, got "
                f"{dimension_numbers!r}"
            )
        )
    nd = len(lhs_s)
    if nd < 2 or len(rhs_s) != nd or len(out_s) != nd:
        raise BluValueError(
            with_user_line(
                f"conv_general_permutations: dimension_numbers {tuple(dimension_numbers)!r} "
                "must be three strings of one length >= 2"
            )
        )
    dn = conv_dimension_numbers((1,) * nd, (1,) * nd, (lhs_s, rhs_s, out_s))
    return tuple(tuple(spec) for spec in dn)


def conv_shape_tuple(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    strides: Sequence[int],
    pads: str | Sequence[tuple[int, int]],
    batch_group_count: int = 1,
) -> tuple[int, ...]:
    """The output shape of a convolution in the canonical layout (``jax.lax.conv_shape_tuple``).

    Args:
        lhs_shape: ``(N, C, spatial...)``.
        rhs_shape: ``(O, I, window...)``, the window already dilated (no dilation here).
        strides: ``s`` ints >= 1.
        pads: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` or ``s`` (low, high) pairs.
        batch_group_count: divides ``N``.

    Returns:
        ``(N / batch_group_count, O, out...)`` with ``out = max(floor((in + lo + hi - window) /
        stride) + 1, 0)``, Python ints.

    Raises:
        BluShapeError: shapes of different ranks or rank < 2. BluValueError: bad strides,
            padding, a pad cropping an axis below 0, a batch group count not dividing ``N``.
    """
    where = "conv_shape_tuple"
    lhs_shape = shape_tuple(lhs_shape, where, "lhs_shape")
    rhs_shape = shape_tuple(rhs_shape, where, "rhs_shape")
    if len(lhs_shape) != len(rhs_shape) or len(lhs_shape) < 2:
        raise BluShapeError(
            with_user_line(
                f"{where}: lhs_shape {lhs_shape} and rhs_shape {rhs_shape} need the same rank >= 2"
            )
        )
    s = len(lhs_shape) - 2
    strides = int_tuple(strides, s, "strides", 1, where)
    pads = check_padding(pads, s, f"{where}: lhs_shape {lhs_shape}, rhs_shape {rhs_shape}")
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    check_cropping(lhs_shape[2:], (1,) * s, pads, f"{where}: lhs_shape {lhs_shape}")
    bg = as_int(batch_group_count, "batch_group_count", where)
    if bg < 1 or lhs_shape[0] % bg:
        raise BluValueError(
            with_user_line(
                f"{where}: batch_group_count={bg} must be >= 1 and divide the batch "
                f"{lhs_shape[0]} of lhs_shape {lhs_shape}"
            )
        )
    out = [
        max((n + lo + hi - k) // st + 1, 0)
        for n, k, st, (lo, hi) in zip(lhs_shape[2:], rhs_shape[2:], strides, pads)
    ]
    return (lhs_shape[0] // bg, rhs_shape[0], *out)


def _canonical(lhs_shape, rhs_shape, dimension_numbers, where):
    lhs_shape = shape_tuple(lhs_shape, where, "lhs_shape")
    rhs_shape = shape_tuple(rhs_shape, where, "rhs_shape")
    dn = conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
    lhs_t = tuple(lhs_shape[a] for a in dn.lhs_spec)
    rhs_t = tuple(rhs_shape[a] for a in dn.rhs_spec)
    return dn, lhs_t, rhs_t


def _to_layout(canonical: Sequence[int], out_spec: Sequence[int]) -> tuple[int, ...]:
    shape = [0] * len(canonical)
    for j, axis in enumerate(out_spec):
        shape[axis] = int(canonical[j])
    return tuple(shape)


def conv_general_shape_tuple(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    dimension_numbers: ConvGeneralDilatedDimensionNumbers,
) -> tuple[int, ...]:
    """The output shape of ``conv_general_dilated`` without dilation or groups, in the layout of
    ``dimension_numbers`` (``jax.lax.conv_general_shape_tuple``).

    Args:
        lhs_shape, rhs_shape: the operands' shapes in the layout of ``dimension_numbers``.
        window_strides, padding: as ``conv_general_dilated``'s.
        dimension_numbers: three strings (as JAX's), a ``ConvDimensionNumbers`` or None.

    Returns:
        The output shape in ``out_spec`` layout (``conv_shape_tuple`` of the canonical shapes).

    Raises:
        As ``conv_shape_tuple``, and BluValueError on bad dimension numbers.
    """
    dn, lhs_t, rhs_t = _canonical(lhs_shape, rhs_shape, dimension_numbers,
                                  "conv_general_shape_tuple")  # fmt: skip
    return _to_layout(conv_shape_tuple(lhs_t, rhs_t, window_strides, padding), dn.out_spec)


def conv_transpose_shape_tuple(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    dimension_numbers: ConvGeneralDilatedDimensionNumbers,
) -> tuple[int, ...]:
    """The output shape of ``conv_transpose`` without kernel dilation, in the layout of
    ``dimension_numbers`` (``jax.lax.conv_transpose_shape_tuple``).

    Per spatial axis of ``n`` elements, a ``k`` window and stride ``s``: ``"SAME"`` gives ``n *
    s``, ``"VALID"`` ``n * s + max(k - s, 0)``, and (low, high) pairs (the transposed
    convolution's own padding) ``(n - 1) * s + 1 + low + high - k + 1``, as JAX's; a window wider
    than the padded input gives 0 (the size ``conv_transpose`` returns).

    Args:
        lhs_shape, rhs_shape: the operands' shapes in the layout of ``dimension_numbers``.
        window_strides: ``s`` ints >= 1 (``conv_transpose``'s ``strides``).
        padding: ``"SAME"``, ``"VALID"`` or ``s`` (low, high) pairs.
        dimension_numbers: three strings, a ``ConvDimensionNumbers`` or None (the canonical
            layout; ``conv_transpose``'s own default is TensorFlow's, so pass it explicitly).

    Returns:
        ``(N, O, out...)`` laid out as ``out_spec``.

    Raises:
        BluValueError: bad strides, padding or dimension numbers, a pad cropping the dilated
            input below 0. BluShapeError: ranks that differ.
    """
    where = "conv_transpose_shape_tuple"
    dn, lhs_t, rhs_t = _canonical(lhs_shape, rhs_shape, dimension_numbers, where)
    s = len(lhs_t) - 2
    strides = int_tuple(window_strides, s, "window_strides", 1, where)
    pads = check_padding(padding, s, f"{where}: lhs_shape {tuple(lhs_shape)}", ("SAME", "VALID"))
    if isinstance(pads, str):
        pads = [_transpose_pads(k, st, pads) for k, st in zip(rhs_t[2:], strides)]
    check_cropping(lhs_t[2:], strides, pads, f"{where}: lhs_shape {tuple(lhs_shape)}")
    out = [
        max(dilate_dim(n, st) + lo + hi - k + 1, 0)
        for n, k, st, (lo, hi) in zip(lhs_t[2:], rhs_t[2:], strides, pads)
    ]
    return _to_layout((lhs_t[0], rhs_t[0], *out), dn.out_spec)
