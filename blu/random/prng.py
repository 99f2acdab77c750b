"""Threefry-2x32 keys and raw bits: the cipher, ``key``, ``split``, ``fold_in``, ``bits``.

Threefry-2x32 with 20 rounds, from J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011 (the Random123 library), written with
``blu.lax`` uint32 operations. Derivations follow JAX's "partitionable" Threefry scheme: element
``i`` of a sample of any shape encrypts the counter ``(hi32(i), lo32(i))`` under the key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import canonical_shape
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.lax.casts import python_scalar_in

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # Threefry's key-schedule constant (Random123's SKEIN_KS_PARITY32)
_U32 = dtypes.uint32


# ---- the block cipher --------------------------------------------------------------------------


def _rotl(x: Any, r: int) -> Any:
    return lax.or_(lax.shift_left(x, r), lax.shift_right_logical(x, 32 - r))


def _threefry_words(k0: Any, k1: Any, x0: Any, x1: Any) -> tuple[Any, Any]:
    """Threefry-2x32-20 of the counters ``(x0, x1)`` (uint32, one shape) under the key words
    ``(k0, k1)`` (uint32 scalars)."""
    shape = get_aval(x0).shape
    k0 = lax.broadcast_in_dim(k0, shape, ())
    k1 = lax.broadcast_in_dim(k1, shape, ())
    ks = (k0, k1, lax.xor(lax.xor(k0, k1), _PARITY))
    x0 = lax.add(x0, ks[0])
    x1 = lax.add(x1, ks[1])
    for i in range(5):  # 5 groups of 4 rounds, a key injection after each group
        for r in _ROTATIONS[i % 2]:
            x0 = lax.add(x0, x1)
            x1 = lax.xor(_rotl(x1, r), x0)
        x0 = lax.add(x0, ks[(i + 1) % 3])
        x1 = lax.add(lax.add(x1, ks[(i + 2) % 3]), i + 1)
    return x0, x1


def threefry2x32(key: Any, x0: Any, x1: Any) -> tuple[Any, Any]:
    """Encrypt the counter pairs ``(x0, x1)`` under ``key`` with Threefry-2x32 (20 rounds).

    Args:
        key: ``uint32[2]`` key.
        x0, x1: uint32 arrays of one shape: the two words of each counter.

    Returns:
        ``(y0, y1)``: two uint32 arrays of that shape.

    Raises:
        BluTypeError / BluShapeError: a bad key, or counters that are not uint32 of one shape.
    """
    k0, k1 = _key_words(key, "threefry2x32")
    a0, a1 = get_aval(x0), get_aval(x1)
    if a0.dtype != _U32 or a1.dtype != _U32 or a0.shape != a1.shape:
        raise BluTypeError(
            with_user_line(
                "threefry2x32: counters must be uint32 arrays of one shape, got "
                f"{a0.str_short()} and {a1.str_short()}"
            )
        )
    return _threefry_words(k0, k1, x0, x1)


# ---- keys --------------------------------------------------------------------------------------


def _check_key(k: Any, name: str) -> Any:
    if isinstance(k, (list, tuple)):
        k = np.asarray(k, np.uint32)
    try:
        aval = get_aval(k)
    except BluTypeError as e:
        raise BluTypeError(
            with_user_line(f"random.{name}: key must be a uint32[2] array, got {type(k).__name__}")
        ) from e
    if aval.dtype != _U32:
        raise BluTypeError(
            with_user_line(
                f"random.{name}: key must be a uint32[2] array (from blu.random.key), got "
                f"{aval.str_short()}"
            )
        )
    if aval.shape != (2,):
        raise BluShapeError(
            with_user_line(
                f"random.{name}: key must have shape (2,), got {aval.str_short()}; for a batch "
                "of keys, vmap over it"
            )
        )
    return k


def _key_words(k: Any, name: str) -> tuple[Any, Any]:
    k = _check_key(k, name)
    w0 = lax.reshape(lax.slice(k, (0,), (1,)), ())
    w1 = lax.reshape(lax.slice(k, (1,), (2,)), ())
    return w0, w1


def _stack_last(a: Any, b: Any) -> Any:
    """Stack two arrays of one shape along a new last axis."""
    shape = get_aval(a).shape
    a = lax.reshape(a, shape + (1,))
    b = lax.reshape(b, shape + (1,))
    return lax.concatenate([a, b], len(shape))


def key(seed: Any) -> Any:
    """A PRNG key from an integer seed.

    Args:
        seed: a Python int in ``[-2**63, 2**64)``, or a scalar integer array (possibly traced).
            Seeds in the int32 range give ``[0, seed mod 2**32]`` (as JAX does); larger ones put
            their high 32 bits in the first word.

    Returns:
        ``uint32[2]`` key.

    Raises:
        BluTypeError: the seed is not an integer scalar; BluValueError: out of range.
    """
    if isinstance(seed, (bool, np.bool_)):
        raise BluTypeError(with_user_line("random.key: seed must be an integer, got a bool"))
    if isinstance(seed, (int, np.integer)):
        s = int(seed)
        if not -(2**63) <= s < 2**64:
            raise BluValueError(with_user_line(f"random.key: seed {s} is out of the 64-bit range"))
        hi = 0 if -(2**31) <= s < 2**31 else (s % 2**64) >> 32
        return Array(np.array([hi, s % 2**32], np.uint32))
    aval = get_aval(seed)
    if aval.shape != () or not dtypes.is_int(aval.dtype):
        raise BluTypeError(
            with_user_line(f"random.key: seed must be an integer scalar, got {aval.str_short()}")
        )
    lo = lax.convert_element_type(seed, _U32)  # wraps: the low 32 bits
    if aval.dtype.itemsize == 8:
        hi = lax.shift_right_logical(lax.convert_element_type(seed, dtypes.uint64), 32)
        hi = lax.convert_element_type(hi, _U32)
    else:
        hi = lax.full((), 0, _U32)
    return _stack_last(hi, lo)


PRNGKey = key  # JAX's older name


def _shape_arg(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, Tracer):
        raise BluTypeError(
            with_user_line(f"random.{name}: shape must be static ints, got a tracer")
        )
    return canonical_shape(shape)


def _counters(shape: tuple[int, ...], name: str) -> tuple[Any, Any]:
    """The counters ``(hi32(i), lo32(i))`` of the row-major flat index i of each element."""
    size = math.prod(shape)
    if size >= 2**32:
        raise BluValueError(
            with_user_line(f"random.{name}: cannot draw {size} >= 2**32 values from one key")
        )
    lo = lax.reshape(lax.iota(_U32, size), shape)
    return lax.full(shape, 0, _U32), lo


def split(key: Any, num: int | Sequence[int] = 2) -> Any:
    """Derive ``num`` new keys from ``key``.

    Args:
        key: ``uint32[2]``.
        num: how many keys (an int, or a shape for an array of keys).

    Returns:
        ``uint32[num, 2]`` (``uint32[*num, 2]`` for a shape).
    """
    k0, k1 = _key_words(key, "split")
    shape = _shape_arg(num, "split")
    y0, y1 = _threefry_words(k0, k1, *_counters(shape, "split"))
    return _stack_last(y0, y1)


def fold_in(key: Any, data: Any) -> Any:
    """A new key from ``key`` and an integer (e.g. a step or a device index).

    Args:
        key: ``uint32[2]``.
        data: a Python int (taken modulo 2**32) or an integer scalar array (possibly traced).

    Returns:
        ``uint32[2]``: the encryption of the counter ``(0, data)`` under ``key``.
    """
    k0, k1 = _key_words(key, "fold_in")
    if isinstance(data, (bool, np.bool_)):
        raise BluTypeError(with_user_line("random.fold_in: data must be an integer, got a bool"))
    if isinstance(data, (int, np.integer)):
        d = Array(np.asarray(int(data) % 2**32, np.uint32))
    else:
        aval = get_aval(data)
        if aval.shape != () or not dtypes.is_int(aval.dtype):
            raise BluTypeError(
                with_user_line(
                    f"random.fold_in: data must be an integer scalar, got {aval.str_short()}"
                )
            )
        d = lax.convert_element_type(data, _U32)
    y0, y1 = _threefry_words(k0, k1, lax.full((), 0, _U32), d)
    return _stack_last(y0, y1)


# ---- raw bits ----------------------------------------------------------------------------------

_UINT_OF_WIDTH = {8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}


def _bits(k: Any, shape: tuple[int, ...], width: int, name: str) -> Any:
    k0, k1 = _key_words(k, name)
    y0, y1 = _threefry_words(k0, k1, *_counters(shape, name))
    if width == 64:
        u64 = dtypes.uint64
        hi = lax.shift_left(lax.convert_element_type(y0, u64), 32)
        return lax.or_(hi, lax.convert_element_type(y1, u64))
    out = lax.xor(y0, y1)
    return out if width == 32 else lax.convert_element_type(out, _UINT_OF_WIDTH[width])


def bits(key: Any, shape: Sequence[int] = (), dtype: Any = dtypes.uint32) -> Any:
    """Uniformly random bits.

    Args:
        key: ``uint32[2]``.
        shape: output shape.
        dtype: uint8, uint16, uint32 or uint64.

    Returns:
        An array of ``shape`` and ``dtype``, every bit independent and fair.

    Raises:
        BluTypeError: ``dtype`` is not an unsigned integer type.
    """
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_unsigned(dtype):
        raise BluTypeError(
            with_user_line(f"random.bits: dtype must be an unsigned integer, got {dtype}")
        )
    return _bits(key, _shape_arg(shape, "bits"), dtype.itemsize * 8, "bits")


# ---- helpers shared with the samplers -----------------------------------------------------------


def _as_array(x: Any, dtype: Any = None) -> Any:
    """Arrays and tracers pass through; numpy values, lists and Python scalars become Arrays.
    With the ``dtype`` the caller converts to, a Python scalar narrower than it is made there
    from its own value (float64's 0.1, JAX's with x64; ``lax.casts.python_scalar_in``)."""
    if dtype is not None:
        x = python_scalar_in(x, dtypes.canonicalize(dtype))
    if isinstance(x, (Array, Tracer)):
        return x
    if isinstance(x, (bool, int, float)):
        d, weak = dtypes.dtype_and_weak(x)
        return Array(np.asarray(x, d), weak)
    v = np.asarray(x)
    return Array(v.astype(dtypes.canonicalize(v.dtype)))


def _broadcasts_to(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    nd = len(dst)
    return len(src) <= nd and all(d in (1, dst[nd - len(src) + i]) for i, d in enumerate(src))


def _param_shape(name: str, **params: Any) -> tuple[int, ...]:
    """The numpy broadcast of the parameters' shapes (the default sample shape)."""
    avals = {k: get_aval(v) for k, v in params.items()}
    try:
        return tuple(np.broadcast_shapes(*(a.shape for a in avals.values())))
    except ValueError:
        detail = ", ".join(f"{k} {a.str_short()}" for k, a in avals.items())
        raise BluShapeError(
            with_user_line(f"random.{name}: {detail} do not broadcast together")
        ) from None


def _broadcast(x: Any, shape: tuple[int, ...], what: str, name: str) -> Any:
    """numpy-style broadcast of ``x`` to exactly ``shape`` (trailing axes aligned)."""
    aval = get_aval(x)
    nd = len(shape)
    if not _broadcasts_to(aval.shape, shape):
        raise BluShapeError(
            with_user_line(
                f"random.{name}: {what} {aval.str_short()} does not broadcast to {shape}"
            )
        )
    return lax.broadcast_in_dim(x, shape, tuple(range(nd - aval.ndim, nd)))


def _params(
    name: str, dtype: np.dtype, shape: Any, **params: Any
) -> tuple[tuple[int, ...], list[Any]]:
    """The sample shape (default: the parameters' broadcast shape) and the parameters as
    ``dtype`` arrays broadcast to it (``BluShapeError`` naming the one that does not)."""
    arrs = {k: lax.convert_element_type(_as_array(v, dtype), dtype) for k, v in params.items()}
    shape = _param_shape(name, **arrs) if shape is None else _shape_arg(shape, name)
    return shape, [_broadcast(a, shape, k, name) for k, a in arrs.items()]


def _unstack2(keys: Any) -> tuple[Any, Any]:
    a = lax.reshape(lax.slice(keys, (0, 0), (1, 2)), (2,))
    b = lax.reshape(lax.slice(keys, (1, 0), (2, 2)), (2,))
    return a, b


def _normalize_axis(axis: int, ndim: int, name: str) -> int:
    axis = dtypes.static_int(axis, f"random.{name}: axis")
    if not -ndim <= axis < ndim:
        raise BluValueError(
            with_user_line(f"random.{name}: axis {axis} out of range for rank {ndim}")
        )
    return axis % ndim
