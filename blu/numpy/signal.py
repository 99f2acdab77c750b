"""``convolve`` and ``correlate`` of 1-d arrays (NumPy's, with ``jax.numpy``'s keywords), via
``lax.conv_general_dilated``."""

from __future__ import annotations

from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import promote_dtypes, to_inexact

__all__ = ["convolve", "correlate"]


def _conv1d(a: Any, v: Any, mode: str, op: str, precision: Any, preferred_element_type: Any):
    if preferred_element_type is None:
        a, v = (to_inexact(x) for x in promote_dtypes(a, v))  # NumPy: inexact results
    else:
        a, v = promote_dtypes(a, v)
    sa, sv = get_aval(a).shape, get_aval(v).shape
    if len(sa) != 1 or len(sv) != 1:
        raise BluShapeError(with_user_line(f"{op}: only 1-d inputs, got shapes {sa} and {sv}"))
    if sa[0] == 0 or sv[0] == 0:
        raise BluValueError(with_user_line(f"{op}: inputs cannot be empty, got {sa} and {sv}"))
    if op == "correlate" and dtypes.is_complex(get_aval(v).dtype):
        v = lax.conj(v)  # NumPy's correlate conjugates v: out[k] = sum_n a[n + k] conj(v[n])
    reverse_out = False
    if sa[0] < sv[0]:  # the longer one slides under the shorter (NumPy swaps them)
        a, v = v, a
        reverse_out = op == "correlate"  # correlate(a, v) = reverse(correlate(v, a))
    if op == "convolve":
        v = lax.rev(v, (0,))
    n = get_aval(v).shape[0]
    if mode == "valid":
        pads = [(0, 0)]
    elif mode == "same":
        pads = [(n // 2, n - n // 2 - 1)]
    elif mode == "full":
        pads = [(n - 1, n - 1)]
    else:
        raise BluValueError(
            with_user_line(f"{op}: mode must be 'full', 'same' or 'valid', got {mode!r}")
        )
    out = lax.conv_general_dilated(
        lax.reshape(a, (1, 1, get_aval(a).shape[0])),
        lax.reshape(v, (1, 1, n)),
        (1,),
        pads,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    out = lax.reshape(out, (get_aval(out).shape[2],))
    return lax.rev(out, (0,)) if reverse_out else out


def convolve(
    a: Any,
    v: Any,
    mode: str = "full",
    *,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """Discrete linear convolution ``out[k] = sum_i a[i] v[k - i]`` of two 1-d arrays
    (``numpy.convolve``).

    Args:
        a, v: non-empty 1-d arrays of lengths ``M`` and ``N`` (integers and bools become the
            default float, unless ``preferred_element_type`` is given).
        mode: ``"full"`` (length ``M + N - 1``), ``"same"`` (length ``max(M, N)``, centred as
            NumPy's) or ``"valid"`` (length ``max(M, N) - min(M, N) + 1``).
        precision, preferred_element_type: as ``lax.conv_general_dilated``'s.

    Returns:
        A 1-d array of the promoted dtype.

    Raises:
        BluShapeError: an input is not 1-d.
        BluValueError: an input is empty, or an unknown ``mode``.
    """
    return _conv1d(a, v, mode, "convolve", precision, preferred_element_type)


def correlate(
    a: Any,
    v: Any,
    mode: str = "valid",
    *,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """Cross-correlation ``out[k] = sum_n a[n + k] conj(v[n])`` of two 1-d arrays
    (``numpy.correlate``: a complex ``v`` is conjugated).

    Args:
        a, v: non-empty 1-d arrays.
        mode: ``"valid"`` (default), ``"same"`` or ``"full"``, as ``convolve``'s.
        precision, preferred_element_type: as ``lax.conv_general_dilated``'s.

    Returns:
        A 1-d array of the promoted dtype.

    Raises:
        BluShapeError: an input is not 1-d.
        BluValueError: an input is empty, or an unknown ``mode``.
    """
    return _conv1d(a, v, mode, "correlate", precision, preferred_element_type)
