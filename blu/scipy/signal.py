"""``blu.scipy.signal`` (``jax.scipy.signal``): N-d ``convolve`` / ``correlate`` (direct, by
``lax.conv_general_dilated``, or by FFT), ``convolve2d`` / ``correlate2d`` (zero fill only, as
JAX), ``fftconvolve`` over chosen axes, ``detrend``, and the spectral analysis of
``blu.scipy._spectral`` (``stft``, ``istft``, ``csd``, ``welch``). JAX's signatures, defaults and
promotion (``jax/_src/scipy/signal.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import (
    BluShapeError,
    BluTypeError,
    BluValueError,
    with_user_line,
)
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    broadcast_to,
    canonicalize_axis,
    promote_dtypes,
    to_inexact,
)
from blu.scipy._detrend import detrend
from blu.scipy._spectral import csd, istft, stft, welch

__all__ = [
    "convolve",
    "convolve2d",
    "correlate",
    "correlate2d",
    "csd",
    "detrend",
    "fftconvolve",
    "istft",
    "stft",
    "welch",
]

_MODES = ("full", "same", "valid")


def _check_mode(mode: str, name: str) -> None:
    if mode not in _MODES:
        raise BluValueError(
            with_user_line(
                f"scipy.signal.{name}: mode must be 'full', 'same' or 'valid', got {mode!r}"
            )
        )


def _operands(in1: Any, in2: Any, name: str, inexact: bool) -> tuple[Any, Any]:
    in1, in2 = promote_dtypes(asarray_operand(in1), asarray_operand(in2))
    if inexact:
        in1, in2 = to_inexact(in1), to_inexact(in2)
    a1, a2 = get_aval(in1), get_aval(in2)
    if a1.dtype == dtypes.bool_:
        raise BluTypeError(
            with_user_line(
                f"scipy.signal.{name}: bool inputs {a1.str_short()}, "
                f"{a2.str_short()}; cast them to a number type"
            )
        )
    if a1.ndim != a2.ndim:
        raise BluShapeError(
            with_user_line(
                f"scipy.signal.{name}: in1 and in2 need the same number of dimensions, got "
                f"{a1.str_short()} and {a2.str_short()}"
            )
        )
    if a1.size == 0 or a2.size == 0:
        raise BluValueError(
            with_user_line(
                f"scipy.signal.{name}: zero-size inputs are not supported, got "
                f"{a1.str_short()} and {a2.str_short()}"
            )
        )
    return in1, in2


def _swap(s1: Sequence[int], s2: Sequence[int], name: str) -> bool:
    """Whether in2 is the larger input (SciPy's rule: one must be at least as large as the
    other in every dimension)."""
    no_swap = all(a >= b for a, b in zip(s1, s2))
    swap = all(a <= b for a, b in zip(s1, s2))
    if not (no_swap or swap):
        raise BluShapeError(
            with_user_line(
                f"scipy.signal.{name}: one input must be at least as large as the other in "
                f"every dimension, got shapes {tuple(s1)} and {tuple(s2)}"
            )
        )
    return swap and not no_swap


def _convolve_nd(in1: Any, in2: Any, mode: str, precision: Any, name: str) -> Any:
    """Direct N-d convolution by ``conv_general_dilated`` (one batch, one feature), the larger
    input as the image; ``"same"`` is centred on ``in1`` as SciPy's."""
    _check_mode(mode, name)
    in1, in2 = _operands(in1, in2, name, inexact=False)
    if get_aval(in1).ndim == 0:
        return in1 * in2
    shape_o = get_aval(in2).shape
    if _swap(get_aval(in1).shape, shape_o, name):
        in1, in2 = in2, in1
    shape = get_aval(in2).shape
    in2 = bnp.flip(in2)
    if mode == "valid":
        padding = [(0, 0) for _ in shape]
    elif mode == "same":
        padding = [(s - 1 - (so - 1) // 2, s - so + (so - 1) // 2) for s, so in zip(shape, shape_o)]
    else:
        padding = [(s - 1, s - 1) for s in shape]
    out = lax.conv_general_dilated(
        in1[None, None], in2[None, None], (1,) * len(shape), padding, precision=precision
    )
    return out[0, 0]


def convolve(
    in1: Any, in2: Any, mode: str = "full", method: str = "auto", precision: Any = None
) -> Any:
    """N-d convolution ``out[k] = sum_i in1[i] in2[k - i]`` (``scipy.signal.convolve``).

    Args:
        in1, in2: non-empty arrays of the same number of dimensions; one must be at least as
            large as the other in every dimension. Promoted together (integers stay integers,
            as JAX and SciPy's direct method; ``method="fft"`` gives floats).
        mode: ``"full"`` (``s1 + s2 - 1``), ``"same"`` (``in1``'s shape, centred as SciPy's) or
            ``"valid"`` (``|s1 - s2| + 1``).
        method: ``"auto"`` and ``"direct"`` (``lax.conv_general_dilated``) or ``"fft"``
            (:func:`fftconvolve`).
        precision: the convolution's precision (direct method).

    Returns:
        The convolution, of the promoted dtype.

    Raises:
        BluShapeError: different numbers of dimensions, or neither input at least as large as
            the other everywhere.
        BluValueError: empty inputs, an unknown ``mode`` or ``method``.
        BluTypeError: bool inputs.
    """
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method in ("direct", "auto"):
        return _convolve_nd(in1, in2, mode, precision, "convolve")
    raise BluValueError(
        with_user_line(
            f"scipy.signal.convolve: method must be 'auto', 'direct' or 'fft', got {method!r}"
        )
    )


def correlate(
    in1: Any, in2: Any, mode: str = "full", method: str = "auto", precision: Any = None
) -> Any:
    """N-d cross-correlation ``out[k] = sum_i in1[i + k] conj(in2[i])``
    (``scipy.signal.correlate``): the convolution with ``in2`` flipped and conjugated.

    Args, returns and raises as :func:`convolve`'s (``mode="same"`` has ``in1``'s shape).
    """
    in2 = asarray_operand(in2)
    return convolve(in1, bnp.flip(bnp.conj(in2)), mode, method=method, precision=precision)


def _check_2d(in1: Any, in2: Any, boundary: str, fillvalue: Any, name: str) -> tuple[Any, Any]:
    if boundary != "fill" or not (np.ndim(fillvalue) == 0 and fillvalue == 0):
        raise NotImplementedError(
            f"scipy.signal.{name}: only boundary='fill' with fillvalue=0 (as JAX), got "
            f"boundary={boundary!r}, fillvalue={fillvalue!r}"
        )
    in1, in2 = asarray_operand(in1), asarray_operand(in2)
    if get_aval(in1).ndim != 2 or get_aval(in2).ndim != 2:
        raise BluShapeError(
            with_user_line(
                f"scipy.signal.{name}: 2-d inputs only, got "
                f"{get_aval(in1).str_short()} and {get_aval(in2).str_short()}"
            )
        )
    return in1, in2


def convolve2d(
    in1: Any,
    in2: Any,
    mode: str = "full",
    boundary: str = "fill",
    fillvalue: Any = 0,
    precision: Any = None,
) -> Any:
    """2-d convolution (``scipy.signal.convolve2d``), zero-filled outside the inputs.

    Args:
        in1, in2: 2-d arrays; as :func:`convolve`'s.
        mode: ``"full"``, ``"same"`` or ``"valid"``.
        boundary, fillvalue: only ``"fill"`` and ``0`` (as JAX).
        precision: the convolution's precision.

    Raises:
        NotImplementedError: another ``boundary`` or ``fillvalue`` (as JAX).
        BluShapeError: an input is not 2-d; as :func:`convolve`'s otherwise.
    """
    in1, in2 = _check_2d(in1, in2, boundary, fillvalue, "convolve2d")
    return _convolve_nd(in1, in2, mode, precision, "convolve2d")


def correlate2d(
    in1: Any,
    in2: Any,
    mode: str = "full",
    boundary: str = "fill",
    fillvalue: Any = 0,
    precision: Any = None,
) -> Any:
    """2-d cross-correlation (``scipy.signal.correlate2d``), zero-filled outside the inputs.

    SciPy's ``correlate2d`` differs from :func:`correlate` when ``in2`` is the larger input:
    ``"full"`` and ``"valid"`` then give the correlation of ``in2`` with ``in1``, flipped and
    conjugated. Args and raises as :func:`convolve2d`'s.
    """
    in1, in2 = _check_2d(in1, in2, boundary, fillvalue, "correlate2d")
    s1, s2 = get_aval(in1).shape, get_aval(in2).shape
    swap = all(a <= b for a, b in zip(s1, s2))
    same_shape = s1 == s2
    name = "correlate2d"
    if mode == "valid" and swap and not same_shape or mode == "full" and swap:
        out = _convolve_nd(bnp.flip(in2), bnp.conj(in1), mode, precision, name)
        return bnp.conj(out) if mode == "full" else out
    return bnp.flip(_convolve_nd(bnp.flip(in1), bnp.conj(in2), mode, precision, name))


def fftconvolve(
    in1: Any, in2: Any, mode: str = "full", axes: Sequence[int] | int | None = None
) -> Any:
    """N-d convolution by FFT (``scipy.signal.fftconvolve``): the inverse FFT of the product
    of the zero-padded inputs' FFTs (``rfftn`` / ``irfftn`` for real inputs).

    Args:
        in1, in2: non-empty arrays of the same number of dimensions, promoted to one inexact
            dtype (integers and bools to the default float).
        mode: ``"full"``, ``"same"`` (``in1``'s shape, centred) or ``"valid"``, over ``axes``.
        axes: the axes convolved (default all); over the others the inputs broadcast (equal
            sizes or 1) and are not convolved (``"same"`` keeps ``in1``'s size there too, as
            SciPy's).

    Returns:
        The convolution (float for real inputs, complex for complex ones).

    Raises:
        BluShapeError: different numbers of dimensions; sizes on the other axes that do not
            broadcast; in ``"valid"`` mode neither input at least as large on every axis.
        BluValueError: empty inputs, an unknown ``mode``, empty or repeated ``axes``.
    """
    _check_mode(mode, "fftconvolve")
    in1, in2 = _operands(in1, in2, "fftconvolve", inexact=True)
    nd = get_aval(in1).ndim
    if nd == 0:
        return in1 * in2
    if axes is None:
        ax = list(range(nd))
    else:
        ax = [canonicalize_axis(a, nd) for a in np.atleast_1d(axes).tolist()]
        if not ax or len(set(ax)) != len(ax):
            raise BluValueError(
                with_user_line(
                    f"scipy.signal.fftconvolve: axes must be non-empty and unique, got {axes!r}"
                )
            )
        ax = sorted(ax)
    s1, s2 = get_aval(in1).shape, get_aval(in2).shape
    b1, b2 = list(s1), list(s2)
    for d in range(nd):
        if d in ax:
            continue
        if s1[d] != s2[d] and 1 not in (s1[d], s2[d]):
            raise BluShapeError(
                with_user_line(
                    f"scipy.signal.fftconvolve: in1 {s1} and in2 {s2} do not broadcast on the "
                    f"non-convolved axis {d}"
                )
            )
        b1[d] = b2[d] = max(s1[d], s2[d])
    in1_shape = s1  # "same" keeps it on every axis (SciPy's: a broadcast axis too)
    in1, in2 = broadcast_to(in1, tuple(b1)), broadcast_to(in2, tuple(b2))
    if mode == "valid" and _swap([s1[d] for d in ax], [s2[d] for d in ax], "fftconvolve"):
        in1, in2 = in2, in1
    s1, s2 = get_aval(in1).shape, get_aval(in2).shape
    full = [s1[d] + s2[d] - 1 for d in ax]
    if dtypes.is_complex(get_aval(in1).dtype):
        conv = bnp.fft.ifftn(bnp.fft.fftn(in1, full, ax) * bnp.fft.fftn(in2, full, ax), full, ax)
    else:
        sp = bnp.fft.rfftn(in1, full, ax) * bnp.fft.rfftn(in2, full, ax)
        conv = bnp.fft.irfftn(sp, full, ax)
    index = [slice(None)] * nd
    if mode == "same":
        for d in range(nd):
            if d not in ax and in1_shape[d] != b1[d]:
                start = (b1[d] - in1_shape[d]) // 2
                index[d] = slice(start, start + in1_shape[d])
    for d, f in zip(ax, full):
        out = {"full": f, "same": s1[d], "valid": s1[d] - s2[d] + 1}[mode]
        start = (f - out) // 2
        index[d] = slice(start, start + out)
    return conv[tuple(index)]
