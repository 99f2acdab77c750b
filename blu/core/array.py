"""blu.Array (a concrete array) and ArrayOps, the numpy-style methods it shares with tracers.

Every operator and method calls a function of ``blu.numpy``, so ``x + y`` on arrays, JVP tracers
or staged tracers follows the same promotion and broadcasting rules and becomes the same
primitives. The core sits below ``blu.numpy`` and never imports it: ``blu.numpy`` fills the table
of those functions when it is imported (``register_array_functions``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from blu.core.aval import shaped
from blu.core.errors import BluError, BluTypeError, BluValueError, with_user_line

# the blu.numpy functions the methods call; blu.numpy registers each of these names
ARRAY_FUNCTIONS = (
    "add", "subtract", "multiply", "true_divide", "floor_divide", "mod", "power", "matmul",
    "negative", "abs", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift", "getitem",
    "IndexUpdateHelper", "transpose", "astype", "reshape", "ravel", "squeeze", "swapaxes", "sum",
    "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all", "any", "cumsum",
    "clip", "round", "dot", "sort", "real", "imag", "conj",
    "argsort", "argpartition", "searchsorted", "take", "nonzero", "compress", "choose", "repeat",
    "diagonal", "trace", "cumprod", "ptp",
    # the Array API's array attributes (blu.numpy.devices)
    "array_namespace", "array_device", "to_device", "dlpack", "dlpack_device",
    "array_devices", "array_sharding", "array_shards",
    "matrix_transpose",
)  # fmt: skip

_functions: dict[str, Callable[..., Any]] = {}


def immutable(x: np.ndarray) -> bool:
    """Whether nothing can write the memory of numpy array ``x`` any more: ``x`` and every array
    it is a view of (``.base``, to the end) are read-only, and the last owns its memory (a base
    that is not a numpy array, such as a ``mmap`` or a ``bytearray``, may be written through
    it). A read-only view of a writable array is not: writing the base changes it, so blu
    copies such an input where it enters (issue #41).
    """
    while True:
        if x.flags.writeable:
            return False
        b = x.base
        if b is None:
            return True
        if type(b) is not np.ndarray and not isinstance(b, np.ndarray):
            return False
        x = b


def register_array_functions(functions: Mapping[str, Callable[..., Any]]) -> None:
    """Give the array methods their implementations (called by ``blu.numpy`` at import).

    Raises:
        BluError: a name of ``ARRAY_FUNCTIONS`` is missing from ``functions``.
    """
    missing = [n for n in ARRAY_FUNCTIONS if n not in functions]
    if missing:
        raise BluError(f"register_array_functions: no implementation for {missing}")
    _functions.update({n: functions[n] for n in ARRAY_FUNCTIONS})


class _Functions:
    """``_bnp().add`` reads the registered function (a clear error before ``import blu``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return _functions[name]
        except KeyError:
            raise BluError(
                f"array method needs blu.numpy's {name!r}: import blu (or blu.numpy) first"
            ) from None


_FUNCTIONS = _Functions()


def _bnp() -> _Functions:
    return _FUNCTIONS


class ArrayOps:
    """Operators and methods of numpy arrays, implemented with ``blu.numpy``'s functions."""

    __slots__ = ()

    def __setitem__(self, idx: Any, value: Any) -> None:
        # arrays and traced values alike (a tracer's raised a raw TypeError)
        raise BluTypeError(
            with_user_line(
                "blu arrays are immutable and do not support item assignment; use "
                "x = x.at[idx].set(value) (or .add/.multiply/...) instead"
            )
        )

    # arithmetic
    def __add__(self, o):
        return _bnp().add(self, o)

    def __radd__(self, o):
        return _bnp().add(o, self)

    def __sub__(self, o):
        return _bnp().subtract(self, o)

    def __rsub__(self, o):
        return _bnp().subtract(o, self)

    def __mul__(self, o):
        return _bnp().multiply(self, o)

    def __rmul__(self, o):
        return _bnp().multiply(o, self)

    def __truediv__(self, o):
        return _bnp().true_divide(self, o)

    def __rtruediv__(self, o):
        return _bnp().true_divide(o, self)

    def __floordiv__(self, o):
        return _bnp().floor_divide(self, o)

    def __rfloordiv__(self, o):
        return _bnp().floor_divide(o, self)

    def __mod__(self, o):
        return _bnp().mod(self, o)

    def __rmod__(self, o):
        return _bnp().mod(o, self)

    def __pow__(self, o):
        return _bnp().power(self, o)

    def __rpow__(self, o):
        return _bnp().power(o, self)

    def __matmul__(self, o):
        return _bnp().matmul(self, o)

    def __rmatmul__(self, o):
        return _bnp().matmul(o, self)

    def __neg__(self):
        return _bnp().negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _bnp().abs(self)

    # comparisons
    def __eq__(self, o):  # type: ignore[override]
        return _bnp().equal(self, o)

    def __ne__(self, o):  # type: ignore[override]
        return _bnp().not_equal(self, o)

    def __lt__(self, o):
        return _bnp().less(self, o)

    def __le__(self, o):
        return _bnp().less_equal(self, o)

    def __gt__(self, o):
        return _bnp().greater(self, o)

    def __ge__(self, o):
        return _bnp().greater_equal(self, o)

    # bits
    def __and__(self, o):
        return _bnp().bitwise_and(self, o)

    def __rand__(self, o):
        return _bnp().bitwise_and(o, self)

    def __or__(self, o):
        return _bnp().bitwise_or(self, o)

    def __ror__(self, o):
        return _bnp().bitwise_or(o, self)

    def __xor__(self, o):
        return _bnp().bitwise_xor(self, o)

    def __rxor__(self, o):
        return _bnp().bitwise_xor(o, self)

    def __invert__(self):
        return _bnp().invert(self)

    def __lshift__(self, o):
        return _bnp().left_shift(self, o)

    def __rshift__(self, o):
        return _bnp().right_shift(self, o)

    # indexing
    def __getitem__(self, idx):
        return _bnp().getitem(self, idx)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    @property
    def at(self):
        """Functional updates: ``x.at[idx].set(v)`` / ``.add`` / ``.multiply`` / ``.get()``."""
        return _bnp().IndexUpdateHelper(self)

    # methods
    @property
    def T(self):
        return _bnp().transpose(self)

    def astype(self, dtype):
        return _bnp().astype(self, dtype)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return _bnp().reshape(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return _bnp().transpose(self, axes or None)

    def ravel(self, order="C"):
        return _bnp().ravel(self, order)

    flatten = ravel

    def squeeze(self, axis=None):
        return _bnp().squeeze(self, axis)

    def swapaxes(self, a, b):
        return _bnp().swapaxes(self, a, b)

    def sum(self, axis=None, dtype=None, keepdims=False):
        return _bnp().sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis=None, dtype=None, keepdims=False):
        return _bnp().prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, keepdims=False):
        return _bnp().mean(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def var(self, axis=None, ddof=0, keepdims=False):
        return _bnp().var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis=None, ddof=0, keepdims=False):
        return _bnp().std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return _bnp().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return _bnp().min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        return _bnp().argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return _bnp().argmin(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return _bnp().all(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        return _bnp().any(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis=None, dtype=None):
        return _bnp().cumsum(self, axis=axis, dtype=dtype)

    def clip(self, min=None, max=None):
        return _bnp().clip(self, min, max)

    def round(self, decimals=0):
        return _bnp().round(self, decimals)

    def dot(self, o):
        return _bnp().dot(self, o)

    def sort(self, axis=-1, **kw):
        return _bnp().sort(self, axis=axis, **kw)

    # numpy's and jax.Array's methods over blu.numpy's functions of the same names
    def argsort(self, axis=-1, **kw):
        return _bnp().argsort(self, axis=axis, **kw)

    def argpartition(self, kth, axis=-1):
        return _bnp().argpartition(self, kth, axis=axis)

    def searchsorted(self, v, side="left", sorter=None, **kw):
        return _bnp().searchsorted(self, v, side=side, sorter=sorter, **kw)

    def take(self, indices, axis=None, out=None, mode=None, **kw):
        return _bnp().take(self, indices, axis=axis, out=out, mode=mode, **kw)

    def nonzero(self, **kw):
        return _bnp().nonzero(self, **kw)

    def compress(self, condition, axis=None, **kw):
        return _bnp().compress(condition, self, axis=axis, **kw)

    def choose(self, choices, out=None, mode="raise"):
        return _bnp().choose(self, choices, out=out, mode=mode)

    def repeat(self, repeats, axis=None, **kw):
        return _bnp().repeat(self, repeats, axis=axis, **kw)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return _bnp().diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None):
        return _bnp().trace(self, offset, axis1, axis2, dtype=dtype)

    def cumprod(self, axis=None, dtype=None):
        return _bnp().cumprod(self, axis=axis, dtype=dtype)

    def ptp(self, axis=None, keepdims=False):
        return _bnp().ptp(self, axis=axis, keepdims=keepdims)

    # complex parts (numpy's attributes; on a real array .real is the array, .imag zeros)
    @property
    def real(self):
        return _bnp().real(self)

    @property
    def imag(self):
        return _bnp().imag(self)

    def conj(self):
        return _bnp().conj(self)

    conjugate = conj

    # the Array API standard's attributes (blu.numpy.devices)
    def __array_namespace__(self, *, api_version=None):
        return _bnp().array_namespace(api_version)

    @property
    def mT(self):
        return _bnp().matrix_transpose(self)

    @property
    def device(self):
        return _bnp().array_device(self)

    def to_device(self, device, /, *, stream=None):
        return _bnp().to_device(self, device, stream=stream)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _bnp().dlpack(
            self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
        )

    def __dlpack_device__(self):
        return _bnp().dlpack_device(self)

    def __rlshift__(self, o):
        return _bnp().left_shift(o, self)

    def __rrshift__(self, o):
        return _bnp().right_shift(o, self)


class Array(ArrayOps):
    """A concrete blu array (on the CPU: a numpy array underneath).

    Behaves like a read-only numpy array: ``np.asarray(x)``, operators, ``.shape``, ``.dtype``,
    ``.T``, ``.astype``, indexing and ``.at[]`` updates. Python scalars that became arrays are
    *weakly typed* (``weak_type``) and defer to the other operand's dtype in promotion.
    """

    # (``_mesh_sharding``: set only on a partitioned jit's replicated outputs, which report
    # ``NamedSharding(mesh, P())`` as ``.sharding``, as JAX's; unset on every other array)
    __slots__ = ("_buf", "_deleted", "weak_type", "_aval", "_mesh_sharding")
    __array_priority__ = 1000

    def __init__(self, value: np.ndarray, weak_type: bool = False):
        # arrays are immutable: np.asarray(x) gives a read-only view (as in JAX). Callers hand
        # over buffers blu owns; user numpy arrays are copied where they enter (to_numpy), unless
        # ``immutable``
        value.setflags(write=False)  # (as ``flags.writeable = False``, without a flags object)
        self._buf = value
        self._deleted: Any = None  # once deleted, why (a str, or an object whose str says it)
        self.weak_type = weak_type
        self._aval = None  # made on first use (shape and dtype never change, even when deleted)

    # ---- lifetime (donation) -------------------------------------------------------------------

    def devices(self) -> set:
        """The devices holding the array (JAX's ``Array.devices()``): the CPU device."""
        return _bnp().array_devices(self)

    @property
    def sharding(self) -> Any:
        """How the array is laid out: a ``SingleDeviceSharding`` (a ``ShardedArray`` has its
        ``NamedSharding``)."""
        return _bnp().array_sharding(self)

    @property
    def addressable_shards(self) -> list:
        """JAX's ``Array.addressable_shards``: one ``Shard``, the whole array on its device (a
        ``ShardedArray`` has one per device)."""
        return _bnp().array_shards(self)

    global_shards = addressable_shards  # (one device: every shard is this process's)
    is_fully_replicated = True
    is_fully_addressable = True

    @property
    def _value(self) -> np.ndarray:
        """The numpy buffer; every read of the value goes through here.

        Raises:
            BluValueError: the array was deleted (donated to a jitted call).
        """
        if self._deleted is not None:
            raise BluValueError(with_user_line(f"Array has been deleted: {self._deleted}"))
        return self._buf

    def delete(self, reason: Any = "deleted with x.delete()") -> None:
        """Give up the array: any later use of its value raises (its shape and dtype remain);
        ``reason`` (or its ``str``, made only when raised) ends the error message."""
        self._deleted = reason
        self._buf = _placeholder(self._buf.shape, self._buf.dtype)

    def is_deleted(self) -> bool:
        return self._deleted is not None

    @property
    def aval(self):
        a = self._aval
        if a is None or a.weak_type != self.weak_type:
            a = self._aval = shaped(self._buf.shape, self._buf.dtype, self.weak_type)
        return a

    @property
    def shape(self) -> tuple[int, ...]:
        return self._buf.shape

    @property
    def dtype(self) -> np.dtype:
        return self._buf.dtype

    @property
    def ndim(self) -> int:
        return self._buf.ndim

    @property
    def size(self) -> int:
        return self._buf.size

    @property
    def nbytes(self) -> int:
        return self._buf.nbytes

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self._value.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self._value
        if dtype is not None and v.dtype != dtype:
            return v.astype(dtype)
        return v.copy() if copy else v

    def __bool__(self) -> bool:
        return bool(self._value)

    def __int__(self) -> int:
        return int(self._value)

    def __float__(self) -> float:
        return float(self._value)

    def __index__(self) -> int:
        return self._value.__index__()

    def __complex__(self) -> complex:
        return complex(self._value)

    def item(self, *args: Any) -> Any:
        return self._value.item(*args)

    def tolist(self) -> Any:
        return self._value.tolist()

    def block_until_ready(self) -> Array:
        """Wait until the value is computed (CPU arrays are always ready)."""
        return self

    def copy(self) -> Array:
        return Array(self._value.copy(), self.weak_type)

    def __repr__(self) -> str:
        if self._deleted is not None:
            return f"Array(<deleted>, shape={self.shape}, dtype={self.dtype})"
        body = np.array2string(self._value, separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype})"

    def __str__(self) -> str:
        return str(self._value)

    def __format__(self, spec: str) -> str:
        return format(self._value.item() if self.ndim == 0 else self._value, spec)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (Array, (self._value, self.weak_type))


_PLACEHOLDERS: dict[tuple, np.ndarray] = {}


def _placeholder(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A read-only zero-stride array of ``shape`` and ``dtype`` standing in for a deleted
    array's buffer (which it lets go of): one per distinct key, shared (nothing writes it)."""
    key = (shape, dtype)
    p = _PLACEHOLDERS.get(key)
    if p is None:
        if len(_PLACEHOLDERS) > 4096:
            _PLACEHOLDERS.clear()
        p = _PLACEHOLDERS[key] = np.broadcast_to(np.zeros((), dtype), shape)
    return p
