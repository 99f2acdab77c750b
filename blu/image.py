"""Image resampling (``jax.image``): ``resize``, ``scale_and_translate`` and ``ResizeMethod``.

As JAX's (``jax/_src/image/scale.py``), a resize is separable: along each resized dimension an
``(in, out)`` weight matrix, the interpolation kernel evaluated at the distances between the
input pixels' centres and the output samples' centres (mapped back into the input), each column
normalised to sum to one, is contracted with the image (one ``einsum``). With ``antialias``,
when downsampling the kernel is widened by ``1 / scale`` (a low-pass filter before sampling).
``"nearest"`` is a gather. Everything is built from ``blu.numpy`` operations, so ``grad``,
``vmap`` and ``jit`` apply.
"""

from __future__ import annotations

import enum
import string
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import Precision
from blu.numpy._promote import asarray_operand, canonicalize_axis, to_inexact

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """The interpolation kernels of :func:`resize` and :func:`scale_and_translate` (JAX's)."""

    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4

    @staticmethod
    def from_string(s: str) -> ResizeMethod:
        """The method named ``s``: ``"nearest"``, ``"linear"`` (``"bilinear"``,
        ``"trilinear"``, ``"triangle"``), ``"lanczos3"``, ``"lanczos5"``, ``"cubic"``
        (``"bicubic"``, ``"tricubic"``).

        Raises:
            BluValueError: an unknown name.
        """
        if s == "nearest":
            return ResizeMethod.NEAREST
        if s in ("linear", "bilinear", "trilinear", "triangle"):
            return ResizeMethod.LINEAR
        if s == "lanczos3":
            return ResizeMethod.LANCZOS3
        if s == "lanczos5":
            return ResizeMethod.LANCZOS5
        if s in ("cubic", "bicubic", "tricubic"):
            return ResizeMethod.CUBIC
        raise BluValueError(
            with_user_line(
                f"image: unknown resize method {s!r}; expected 'nearest', 'linear', "
                "'bilinear', 'trilinear', 'triangle', 'cubic', 'bicubic', 'tricubic', "
                "'lanczos3' or 'lanczos5'"
            )
        )


def _lanczos(xp: Any, radius: float, x: Any) -> Any:
    """``sinc(x) sinc(x / radius)`` for ``x < radius``, else 0 (``x >= 0``); below ``1e-3``
    its Taylor polynomial ``1 - pi**2 (1 + 1 / radius**2) x**2 / 6`` (no 0/0; JAX's has
    ``1 - x**2`` there, off by up to 1e-6)."""
    y = radius * xp.sin(np.pi * x) * xp.sin(np.pi * x / radius)
    safe = xp.where(x != 0, np.pi**2 * x**2, 1.0)
    c2 = np.pi**2 * (1 + 1 / radius**2) / 6
    out = xp.where(x > 1e-3, y / safe, 1 - c2 * x**2)
    return xp.where(x > radius, 0.0, out)


def _keys_cubic(xp: Any, x: Any) -> Any:
    """Keys' cubic convolution kernel with ``a = -0.5`` (Keys 1981, IEEE TASSP 29(6)),
    ``x >= 0``."""
    out = ((1.5 * x - 2.5) * x) * x + 1.0
    out = xp.where(x >= 1.0, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, out)
    return xp.where(x >= 2.0, 0.0, out)


def _triangle(xp: Any, x: Any) -> Any:
    return xp.maximum(0.0, 1 - xp.abs(x))


# the kernels of x >= 0, written for numpy (resize's constant weights) and blu.numpy (xp)
_KERNELS: dict[ResizeMethod, Callable[[Any, Any], Any]] = {
    ResizeMethod.LINEAR: _triangle,
    ResizeMethod.LANCZOS3: lambda xp, x: _lanczos(xp, 3.0, x),
    ResizeMethod.LANCZOS5: lambda xp, x: _lanczos(xp, 5.0, x),
    ResizeMethod.CUBIC: _keys_cubic,
}


def _method(method: Any) -> ResizeMethod:
    if isinstance(method, ResizeMethod):
        return method
    if isinstance(method, str):
        return ResizeMethod.from_string(method)
    raise BluTypeError(
        with_user_line(f"image: method must be a str or ResizeMethod, got {type(method).__name__}")
    )


def _weights(xp, dtype, m, n, scale, translation, kernel, antialias):
    """The ``(m, n)`` weights taking ``m`` input pixels to ``n`` samples (JAX's
    ``compute_weight_mat``), in ``dtype`` with ``xp`` (numpy or blu.numpy): output pixel
    ``j``'s centre ``j + 0.5`` maps to the input coordinate ``(j + 0.5 - translation) /
    scale``; columns sum to one, or are zero where the sample lies outside the input or the
    kernel's weights there sum to (almost) zero."""
    inv_scale = 1.0 / scale
    kernel_scale = xp.maximum(inv_scale, 1.0) if antialias else 1.0
    sample = (xp.arange(n, dtype=dtype) + 0.5) * inv_scale - translation * inv_scale - 0.5
    x = xp.abs(sample[None, :] - xp.arange(m, dtype=dtype)[:, None]) / kernel_scale
    w = kernel(xp, x)
    total = xp.sum(w, axis=0, keepdims=True)
    tiny = 1000.0 * float(np.finfo(np.float32).eps)
    w = xp.where(xp.abs(total) > tiny, w / xp.where(total != 0, total, 1), 0)
    inside = xp.logical_and(sample >= -0.5, sample <= m - 0.5)
    return xp.where(inside[None, :], w, 0)


def _contract(x: Any, shape: tuple[int, ...], dims: list[int], weights: list, precision: Any):
    """``x`` with each of ``dims`` contracted with its weight matrix (one ``einsum``)."""
    if not dims:
        return x
    letters = string.ascii_letters
    nd = len(shape)
    if nd + len(dims) > len(letters):
        raise BluShapeError(with_user_line(f"image: too many dimensions ({nd})"))
    x_idx = list(letters[:nd])
    out_idx = list(x_idx)
    operands, specs = [x], ["".join(x_idx)]
    xdtype = get_aval(x).dtype
    for i, (d, w) in enumerate(zip(dims, weights)):
        operands.append(w.astype(xdtype))  # (numpy's astype for resize's constants)
        specs.append(x_idx[d] + letters[nd + i])
        out_idx[d] = letters[nd + i]
    return bnp.einsum(",".join(specs) + "->" + "".join(out_idx), *operands, precision=precision)


def _check_shape(image: Any, shape: Any, name: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise BluTypeError(
            with_user_line(f"image.{name}: shape must be a sequence of ints, got {shape!r}")
        ) from None
    aval = get_aval(image)
    if len(shape) != aval.ndim or any(s < 0 for s in shape):
        raise BluShapeError(
            with_user_line(
                f"image.{name}: shape {shape} must have one non-negative size per dimension "
                f"of the image {aval.str_short()}"
            )
        )
    return shape


def _nearest(x: Any, shape: tuple[int, ...]) -> Any:
    """JAX's ``_resize_nearest``: output ``j`` takes input ``floor((j + 0.5) m / n)``, computed
    in float32 as JAX does."""
    for d, (m, n) in enumerate(zip(get_aval(x).shape, shape)):
        if m == n:
            continue
        pos = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(m) / np.float32(n)
        if m == 0:
            raise BluShapeError(
                with_user_line(f"image.resize: cannot resize an empty dimension {d} to {n}")
            )
        idx = np.minimum(np.floor(pos).astype(np.int32), m - 1)
        x = bnp.take(x, idx, axis=d)
    return x


def resize(
    image: Any,
    shape: Sequence[int],
    method: str | ResizeMethod,
    antialias: bool = True,
    precision: Any = Precision.HIGHEST,
) -> Any:
    """Resize ``image`` to ``shape`` (``jax.image.resize``).

    Every dimension whose size changes is resampled, each on its own (``shape`` has one entry
    per dimension, batch and channel dimensions keep theirs). Pixel centres are aligned as
    TensorFlow's ``half_pixel_centers`` / PIL: output pixel ``j`` samples the input at
    ``(j + 0.5) * in / out - 0.5``.

    Args:
        image: an array of any dimensions; integer and bool images become float32 (as JAX's
            ``result_type(image, float32)``), except for ``"nearest"``, which keeps the dtype.
        shape: the output shape, as many sizes as ``image`` has dimensions.
        method: a :class:`ResizeMethod` or its name: ``"nearest"``; ``"linear"`` /
            ``"bilinear"`` / ``"trilinear"`` / ``"triangle"``; ``"cubic"`` / ``"bicubic"`` /
            ``"tricubic"`` (Keys' kernel, ``a = -0.5``); ``"lanczos3"``, ``"lanczos5"``.
        antialias: when downsampling, widen the kernel by ``in / out`` (area-averaging); no
            effect when upsampling or for ``"nearest"``.
        precision: the ``einsum``'s precision (default ``HIGHEST``).

    The weight matrices depend on the shapes alone: they are computed in float64 with numpy
    when the call is traced (constants of the program) and cast to the image's dtype, so a
    jitted resize is one contraction.

    Returns:
        An array of ``shape``; the image's dtype (floats) or float32 (integers).

    Raises:
        BluShapeError: ``shape`` has the wrong length or a negative size.
        BluValueError: an unknown ``method``.
    """
    image = asarray_operand(image)
    shape = _check_shape(image, shape, "resize")
    method = _method(method)
    if method == ResizeMethod.NEAREST:
        return _nearest(image, shape)
    if not dtypes.is_inexact(get_aval(image).dtype):
        image = image.astype(np.float32)
    in_shape = get_aval(image).shape
    dims = [d for d in range(len(shape)) if in_shape[d] != shape[d]]
    kernel = _KERNELS[method]
    weights = [  # constants, computed in float64 now and cast to the image's dtype
        _weights(np, np.float64, in_shape[d], shape[d],
                 1.0 if shape[d] == 0 else shape[d] / in_shape[d], 0.0, kernel, antialias)
        for d in dims
    ]  # fmt: skip
    return _contract(image, shape, dims, weights, precision)


def scale_and_translate(
    image: Any,
    shape: Sequence[int],
    spatial_dims: Sequence[int],
    scale: Any,
    translation: Any,
    method: str | ResizeMethod,
    antialias: bool = True,
    precision: Any = Precision.HIGHEST,
) -> Any:
    """Resample ``image`` to ``shape`` under a scale and a translation of ``spatial_dims``
    (``jax.image.scale_and_translate``).

    Along spatial dimension ``d = spatial_dims[i]``, output pixel ``j`` (centre ``j + 0.5``)
    samples the input at the continuous coordinate ``(j + 0.5 - translation[i]) / scale[i]``
    (pixel centres at ``k + 0.5``); samples outside ``[0, in]`` are zero. Differentiable in
    ``image``, ``scale`` and ``translation``.

    Args:
        image: an array; integers and bools become the default float.
        shape: the output shape (one size per dimension of ``image``).
        spatial_dims: the dimensions resampled (the others must keep their sizes).
        scale, translation: 1-d arrays with one entry per spatial dimension; integers become
            the default float. The weights are computed in their promoted dtype and cast to
            the image's dtype.
        method: as :func:`resize`'s, except ``"nearest"``.
        antialias, precision: as :func:`resize`'s.

    Returns:
        An array of ``shape`` and the image's (inexact) dtype.

    Raises:
        BluShapeError: ``shape`` has the wrong length, ``scale`` / ``translation`` do not
            have one entry per spatial dimension, or a non-spatial dimension changes size.
        BluValueError: ``method`` is ``"nearest"`` (not supported, as JAX) or unknown.
    """
    image = to_inexact(asarray_operand(image))
    shape = _check_shape(image, shape, "scale_and_translate")
    method = _method(method)
    if method == ResizeMethod.NEAREST:
        raise BluValueError(
            with_user_line(
                "image.scale_and_translate: nearest-neighbour resampling is not supported "
                "(as JAX); use resize(..., 'nearest') or 'linear'"
            )
        )
    nd = len(shape)
    dims = [canonicalize_axis(d, nd) for d in spatial_dims]
    in_shape = get_aval(image).shape
    for d in range(nd):
        if d not in dims and in_shape[d] != shape[d]:
            raise BluShapeError(
                with_user_line(
                    f"image.scale_and_translate: dimension {d} is not spatial but its size "
                    f"changes from {in_shape[d]} to {shape[d]} (image {in_shape}, shape {shape})"
                )
            )
    scale, translation = asarray_operand(scale), asarray_operand(translation)
    for v, name in ((scale, "scale"), (translation, "translation")):
        if get_aval(v).shape != (len(dims),):
            raise BluShapeError(
                with_user_line(
                    f"image.scale_and_translate: {name} {get_aval(v).str_short()} must be 1-d "
                    f"with one entry per spatial dimension ({len(dims)})"
                )
            )
    st_dtype = dtypes.result_type(scale, translation)
    if not dtypes.is_inexact(st_dtype):
        st_dtype = dtypes.default_float
    if dtypes.is_complex(st_dtype):
        raise BluTypeError(
            with_user_line(f"image.scale_and_translate: scale and translation are {st_dtype}")
        )
    scale, translation = scale.astype(st_dtype), translation.astype(st_dtype)
    kernel = _KERNELS[method]
    weights = [
        _weights(bnp, st_dtype, in_shape[d], shape[d], scale[i], translation[i], kernel, antialias)
        for i, d in enumerate(dims)
    ]
    return _contract(image, shape, dims, weights, precision)
