"""NumPy's ufunc objects (``jax.numpy.ufunc``, ``frompyfunc``): ``bnp.add``, ``bnp.sin``, ... are
:class:`ufunc` instances that call blu.numpy's function (the same trace as before) and add
numpy's ``nin``, ``nout``, ``identity`` and the methods ``reduce``, ``accumulate``, ``outer``,
``at`` and ``reduceat``.

The methods are in ``ufunc_methods``: the standard ufuncs use blu's existing operations where
one exists (``add.reduce`` is ``sum``, ``multiply.accumulate`` ``cumprod``, ``maximum.at``
``x.at[i].max``...); every other binary ufunc, and those made by :func:`frompyfunc`, reduce and
accumulate as a ``lax.scan`` in numpy's order, and ``at`` and ``reduceat`` as a ``fori_loop``,
as JAX's ``ufunc_api`` does. Arrays are immutable: ``at`` returns the updated array and needs
``inplace=False``; ``out=`` is rejected.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core.errors import (
    BluIndexError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    with_user_line,
)
from blu.core.interpreter import get_aval
from blu.numpy import complexes, extras, logic, nanfuncs, standard, transcendental, ufuncs
from blu.numpy._promote import (
    asarray_operand,
    broadcast_shapes,
    canonicalize_axes,
    canonicalize_axis,
    is_concrete,
)
from blu.numpy.extras import vectorize
from blu.numpy.manipulation import reshape
from blu.numpy.reductions import cumprod, cumsum, prod
from blu.numpy.reductions import max as _max
from blu.numpy.reductions import min as _min
from blu.numpy.reductions import sum as _sum
from blu.numpy.ufunc_methods import (
    _accumulate_via_scan,
    _accumulate_with,
    _at_via_loop,
    _at_with,
    _reduce_logaddexp,
    _reduce_logical,
    _reduce_monoid,
    _reduce_via_scan,
    _reduce_with,
    _reduceat_via_loop,
)

_AT_INPLACE = (
    "{name}.at: blu arrays are immutable, so at() cannot update in place as numpy's does; pass "
    "inplace=False and use the result: a = bnp.{name}.at(a, indices, b, inplace=False)"
)


def _static(name: str) -> Callable[[Any], Any]:
    return lambda self: self._props[name]


class ufunc:
    """A universal function: elementwise over broadcast arrays, with numpy's ufunc methods
    (``jax.numpy.ufunc``, after :class:`numpy.ufunc`).

    ``bnp.add``, ``bnp.multiply``, ``bnp.sin``, ... are ufuncs; :func:`frompyfunc` makes one from
    a function of scalars. Calling one calls the function it wraps. The binary ones (``nin == 2``,
    ``nout == 1``) have ``reduce``, ``accumulate``, ``outer`` and ``reduceat``; every one has
    ``at``.

    Args:
        func: the elementwise function (of ``nin`` arrays, returning ``nout`` arrays).
        nin: the number of inputs.
        nout: the number of outputs.
        name: the name (default ``func.__name__``).
        identity: the value ``x`` with ``func(identity, x) == x``, or None.
        call, reduce, accumulate, at, reduceat: implementations of the call and the methods
            (default: ``func`` vectorized over scalars with ``vmap``, and the loops).

    Examples:
        >>> import blu.numpy as bnp
        >>> x = bnp.array([1, 2, 3, 4])
        >>> bnp.add.reduce(x), bnp.multiply.accumulate(x)[-1], bnp.add.outer(x, x).shape
        (Array(10, dtype=int32), Array(24, dtype=int32), (4, 4))
    """

    def __init__(
        self,
        func: Callable[..., Any],
        /,
        nin: int,
        nout: int,
        *,
        name: str | None = None,
        identity: Any = None,
        call: Callable[..., Any] | None = None,
        reduce: Callable[..., Any] | None = None,
        accumulate: Callable[..., Any] | None = None,
        at: Callable[..., Any] | None = None,
        reduceat: Callable[..., Any] | None = None,
    ):
        for arg, v in (("nin", nin), ("nout", nout)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise BluValueError(with_user_line(f"ufunc: {arg} must be an int >= 1, got {v!r}"))
        self.__name__ = name or getattr(func, "__name__", type(func).__name__)
        self.__qualname__ = self.__name__
        self.__doc__ = func.__doc__
        self.__module__ = getattr(func, "__module__", None) or __name__
        self._props = {
            "func": func,
            "nin": int(nin),
            "nout": int(nout),
            "identity": identity,
            "call": call,
            "reduce": reduce,
            "accumulate": accumulate,
            "at": at,
            "reduceat": reduceat,
        }
        try:  # inspect.signature(bnp.add) is the function's
            self.__signature__ = inspect.signature(call or func)
        except (TypeError, ValueError):
            pass

    _func = property(_static("func"))
    nin = property(_static("nin"), doc="The number of inputs.")
    nout = property(_static("nout"), doc="The number of outputs.")
    nargs = property(
        _static("nin"),
        doc="The number of arguments, ``nin`` (JAX's; numpy's counts the outputs too).",
    )
    identity = property(_static("identity"), doc="The identity of the operation, or None.")

    def __repr__(self) -> str:
        return f"<bnp.ufunc '{self.__name__}'>"

    def __reduce__(self) -> Any:
        if _STANDARD.get(self.__name__) is self:
            return (_standard, (self.__name__,))
        p = self._props
        return (_frompyfunc, (p["func"], p["nin"], p["nout"], p["identity"]))

    def __call__(self, *args: Any, out: None = None, where: None = None, **kwargs: Any) -> Any:
        if out is not None or where is not None:
            arg = "out" if out is not None else "where"
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}: the {arg}= argument is not supported (blu arrays are "
                    "immutable; use bnp.where on the result)"
                )
            )
        call = self._props["call"]
        if call is not None:
            return call(*args, **kwargs)
        if len(args) != self.nin or kwargs:
            raise BluTypeError(
                with_user_line(
                    f"{self.__name__} takes {self.nin} positional arguments, got {len(args)}"
                    + (f" and keywords {sorted(kwargs)}" if kwargs else "")
                )
            )
        return vectorize(self._func)(*args)

    def _binary(self, method: str, out: Any = None) -> None:
        if self.nin != 2 or self.nout != 1:
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.{method}: only binary ufuncs with one output have it "
                    f"({self.__name__} has nin={self.nin}, nout={self.nout})"
                )
            )
        if out is not None:
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.{method}: the out= argument is not supported (blu arrays "
                    "are immutable; use the result)"
                )
            )

    def _out_dtype(self, *dts: Any) -> Any:
        from blu.transforms.jit import eval_shape

        one = [lax.full((), 0, dt) for dt in dts]
        return eval_shape(self, *one).dtype

    def reduce(
        self,
        a: Any,
        axis: Any = 0,
        dtype: Any = None,
        out: None = None,
        keepdims: bool = False,
        initial: Any = None,
        where: Any = None,
    ) -> Any:
        """Reduce ``a`` over ``axis`` (an int, a tuple, or None for all) with this binary ufunc
        (:meth:`numpy.ufunc.reduce`): ``f(...f(f(a[0], a[1]), a[2])..., a[n-1])``, from
        ``initial`` when given.

        Args:
            a: the array.
            axis: the axis or axes to reduce (default 0; None: all).
            dtype: the dtype of the computation and the result.
            out: not supported (must be None).
            keepdims: keep the reduced axes with size 1.
            initial: the start value (needed on empty axes when the ufunc has no identity).
            where: a bool mask broadcast against ``a``: the elements it is False at are left
                out (needs ``initial`` or an identity).

        Raises:
            BluValueError: a ufunc that is not binary, ``out=``, an empty reduction or ``where``
                with neither identity nor ``initial``, a non-bool ``where``, an ``initial``
                that is not a scalar (numpy's and JAX's).
            BluShapeError: ``where`` does not broadcast to ``a``'s shape (numpy's).
            BluAxisError: an axis out of range.
            BluTypeError: a ``dtype`` the ufunc's results do not keep (``arctan2`` of ints
                in int32), a comparison (``equal``, ``less``...) of non-bool values without
                ``dtype=bool`` (numpy has no loop for either).
        """
        self._binary("reduce", out)
        a = asarray_operand(a)
        aval = get_aval(a)
        axes = canonicalize_axes(axis, aval.ndim, f"{self.__name__}.reduce")
        if where is not None:
            where = asarray_operand(where)
            if get_aval(where).dtype != np.dtype(bool):
                raise BluValueError(
                    with_user_line(
                        f"{self.__name__}.reduce: where must be a bool array, got "
                        f"{get_aval(where).str_short()}"
                    )
                )
            if self.identity is None and initial is None:
                raise BluValueError(
                    with_user_line(
                        f"{self.__name__}.reduce: the ufunc has no identity, so a where= mask "
                        "needs initial="
                    )
                )
            if broadcast_shapes(get_aval(where).shape, aval.shape) != aval.shape:
                raise BluShapeError(
                    with_user_line(
                        f"{self.__name__}.reduce: where {get_aval(where).str_short()} does not "
                        f"broadcast to the array's shape {aval.shape}"
                    )
                )
        if initial is not None and get_aval(asarray_operand(initial)).shape != ():
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.reduce: initial must be a scalar, got shape "
                    f"{get_aval(asarray_operand(initial)).shape}"
                )
            )
        n = math.prod(aval.shape[d] for d in axes)
        if n == 0 and self.identity is None and initial is None:
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.reduce: zero-size reduction of {aval.str_short()} over axes "
                    f"{axes}, and the ufunc has no identity (give initial=)"
                )
            )
        impl = self._props["reduce"] or _reduce_via_scan
        return impl(self, a, axes, dtype, keepdims, initial, where)

    def accumulate(self, a: Any, axis: int = 0, dtype: Any = None, out: None = None) -> Any:
        """The running reduction along ``axis`` (:meth:`numpy.ufunc.accumulate`):
        ``out[i] = f(out[i-1], a[i])``, ``out[0] = a[0]``. ``axis=None`` is axis 0 of a 1-d
        array (numpy's).

        Raises:
            BluValueError: a ufunc that is not binary, ``out=``, ``axis`` a tuple, or None for
                an array that is not 1-d.
            BluAxisError: ``axis`` out of range.
            BluTypeError: a ``dtype`` the ufunc's results do not keep (``arctan2`` of ints
                in int32), a comparison (``equal``, ``less``...) of non-bool values without
                ``dtype=bool`` (numpy has no loop for either).
        """
        self._binary("accumulate", out)
        a = asarray_operand(a)
        if axis is None and get_aval(a).ndim == 1:
            axis = 0
        if axis is None or isinstance(axis, (tuple, list)):
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.accumulate: axis must be one int (None only for a 1-d "
                    f"array), got {axis!r} for {get_aval(a).str_short()}"
                )
            )
        ax = canonicalize_axis(axis, get_aval(a).ndim, f"{self.__name__}.accumulate")
        impl = self._props["accumulate"] or _accumulate_via_scan
        return impl(self, a, ax, dtype)

    def outer(self, a: Any, b: Any, /) -> Any:
        """``f(a[i...], b[j...])`` for every pair: shape ``a.shape + b.shape``
        (:meth:`numpy.ufunc.outer`)."""
        if self.nin != 2:
            self._binary("outer")
        a, b = asarray_operand(a), asarray_operand(b)
        sa, sb = get_aval(a).shape, get_aval(b).shape
        return self(reshape(a, sa + (1,) * len(sb)), b)

    def at(self, a: Any, indices: Any, b: Any = None, /, *, inplace: bool = True) -> Any:
        """``a`` with ``a[indices] = f(a[indices], b)`` applied once per index, repeated indices
        applied again (:meth:`numpy.ufunc.at`, unbuffered), returned as a new array.

        Raises:
            BluValueError: ``inplace`` left True (blu arrays are immutable), ``b`` missing for a
                binary ufunc or given for a unary one.
        """
        if inplace:
            raise BluValueError(with_user_line(_AT_INPLACE.format(name=self.__name__)))
        if self.nout != 1 or self.nin not in (1, 2) or (b is None) != (self.nin == 1):
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.at: takes {self.nin - 1} value argument(s) for a ufunc with "
                    f"nin={self.nin}, nout={self.nout}; got b={'None' if b is None else '...'}"
                )
            )
        a = asarray_operand(a)
        impl = self._props["at"] or _at_via_loop
        return impl(self, a, indices, *(() if b is None else (b,)))

    def reduceat(
        self, a: Any, indices: Any, axis: int = 0, dtype: Any = None, out: None = None
    ) -> Any:
        """Reductions over the slices ``a[indices[i]:indices[i+1]]`` along ``axis`` (the last
        to the end; ``a[indices[i]]`` where ``indices[i] >= indices[i+1]``), numpy's
        :meth:`numpy.ufunc.reduceat`, in ``reduce``'s dtype (``divide.reduceat`` of ints folds
        floats).

        Raises:
            BluValueError: a ufunc that is not binary, ``out=``, ``a`` a scalar, ``indices`` not
                one-dimensional integers.
            BluAxisError: ``axis`` out of range.
            BluIndexError: concrete ``indices`` out of range (traced ones are clamped).
            BluTypeError: a ``dtype`` the ufunc's results do not keep (``arctan2`` of ints
                in int32), a comparison (``equal``, ``less``...) of non-bool values without
                ``dtype=bool`` (numpy has no loop for either).
        """
        self._binary("reduceat", out)
        a = asarray_operand(a)
        idx = asarray_operand(indices)
        ia = get_aval(idx)
        if get_aval(a).ndim == 0 or ia.ndim != 1 or not np.issubdtype(ia.dtype, np.integer):
            raise BluValueError(
                with_user_line(
                    f"{self.__name__}.reduceat: needs an array of rank >= 1 and 1-d integer "
                    f"indices, got {get_aval(a).str_short()} and {ia.str_short()}"
                )
            )
        ax = canonicalize_axis(axis, get_aval(a).ndim, f"{self.__name__}.reduceat")
        n = get_aval(a).shape[ax]
        if is_concrete(indices) and not np.all(
            (np.asarray(indices) >= 0) & (np.asarray(indices) < n)
        ):
            raise BluIndexError(
                with_user_line(
                    f"{self.__name__}.reduceat: indices {np.asarray(indices).tolist()} out of "
                    f"range for axis {ax} of size {n}"
                )
            )
        impl = self._props["reduceat"] or _reduceat_via_loop
        return impl(self, a, idx, ax, dtype)


def frompyfunc(func: Callable[..., Any], /, nin: int, nout: int, *, identity: Any = None) -> ufunc:
    """A :class:`ufunc` from ``func``, a function of ``nin`` scalars returning ``nout`` of them
    (``jax.numpy.frompyfunc``): its call is ``func`` vectorized over broadcast arrays with
    ``vmap`` (``bnp.vectorize``), its ``reduce`` and ``accumulate`` a ``scan``, ``at`` and
    ``reduceat`` a ``fori_loop``.

    ``func`` is traced (it must use blu operations on its scalar arguments, not Python control
    flow on their values).

    Args:
        func: ``(x1, ..., x_nin) -> y`` (a tuple of ``nout`` values when ``nout > 1``).
        nin: the number of inputs.
        nout: the number of outputs.
        identity: the identity of ``func`` (``reduce`` of an empty array gives it), or None.

    Examples:
        >>> import operator, blu.numpy as bnp
        >>> add = bnp.frompyfunc(operator.add, nin=2, nout=1, identity=0)
        >>> add.reduce(bnp.arange(5))
        Array(10, dtype=int32)
    """
    return ufunc(func, nin, nout, identity=identity)


def _frompyfunc(func: Callable[..., Any], nin: int, nout: int, identity: Any) -> ufunc:
    return frompyfunc(func, nin, nout, identity=identity)


# ---- the standard ufuncs: blu.numpy's functions numpy makes ufuncs, with their fast paths -----


# name -> (nin, nout, identity); aliases (absolute, pow, acos...) share their function's ufunc
_SPECS: dict[str, tuple[int, int, Any]] = {
    **{n: (2, 1, None) for n in (
        "subtract", "divide", "true_divide", "floor_divide", "mod", "remainder", "fmod", "power",
        "pow", "float_power", "maximum", "minimum", "fmax", "fmin", "copysign", "arctan2",
        "atan2", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
        "left_shift", "bitwise_left_shift", "right_shift", "bitwise_right_shift", "lcm", "ldexp",
        "heaviside", "nextafter")},
    "add": (2, 1, 0), "multiply": (2, 1, 1), "hypot": (2, 1, 0), "gcd": (2, 1, 0),
    "logaddexp": (2, 1, -np.inf), "logaddexp2": (2, 1, -np.inf),
    "logical_and": (2, 1, True), "logical_or": (2, 1, False), "logical_xor": (2, 1, False),
    "bitwise_and": (2, 1, -1), "bitwise_or": (2, 1, 0), "bitwise_xor": (2, 1, 0),
    "divmod": (2, 2, None), "frexp": (1, 2, None), "modf": (1, 2, None),
    **{n: (1, 1, None) for n in (
        "abs", "absolute", "fabs", "negative", "positive", "sign", "square", "reciprocal",
        "floor", "ceil", "trunc", "rint", "isfinite", "isnan", "isinf", "signbit", "sqrt",
        "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
        "arcsin", "asin", "arccos", "acos", "arctan", "atan", "sinh", "cosh", "tanh", "arcsinh",
        "asinh", "arccosh", "acosh", "arctanh", "atanh", "deg2rad", "radians", "rad2deg",
        "degrees", "invert", "bitwise_not", "bitwise_invert", "logical_not", "bitwise_count",
        "conj", "conjugate", "spacing")},
}  # fmt: skip

# the fast paths, by the wrapped function's name
_METHODS: dict[str, dict[str, Callable[..., Any]]] = {
    "add": {"reduce": _reduce_with(_sum, True), "accumulate": _accumulate_with(cumsum),
            "at": _at_with("add")},
    "multiply": {"reduce": _reduce_with(prod, True), "accumulate": _accumulate_with(cumprod),
                 "at": _at_with("multiply")},
    "subtract": {"at": _at_with("subtract")},
    "maximum": {"reduce": _reduce_with(_max, False), "at": _at_with("max")},
    "minimum": {"reduce": _reduce_with(_min, False), "at": _at_with("min")},
    "logical_and": {"reduce": _reduce_logical(lax.reduce_and)},
    "logical_or": {"reduce": _reduce_logical(lax.reduce_or)},
    "logical_xor": {"reduce": _reduce_logical(lax.reduce_xor)},
    "bitwise_and": {"reduce": _reduce_monoid},
    "bitwise_or": {"reduce": _reduce_monoid},
    "bitwise_xor": {"reduce": _reduce_monoid},
    "logaddexp": {"reduce": _reduce_logaddexp(False)},
    "logaddexp2": {"reduce": _reduce_logaddexp(True)},
}  # fmt: skip

_SOURCES = (ufuncs, logic, transcendental, complexes, nanfuncs, extras, standard)
_STANDARD: dict[str, ufunc] = {}  # by the wrapped function's name (pickling)


def _standard(name: str) -> ufunc:
    return _STANDARD[name]


def _make_standard() -> dict[str, ufunc]:
    by_func: dict[int, ufunc] = {}
    out = {}
    for public, (nin, nout, identity) in _SPECS.items():
        func = next(getattr(m, public) for m in _SOURCES if hasattr(m, public))
        if id(func) not in by_func:
            u = ufunc(func, nin, nout, identity=identity, call=func,
                      **_METHODS.get(func.__name__, {}))  # fmt: skip
            by_func[id(func)] = _STANDARD[u.__name__] = u
        out[public] = by_func[id(func)]
    return out


_UFUNCS = _make_standard()
globals().update(_UFUNCS)

__all__ = ["ufunc", "frompyfunc", *_UFUNCS]  # noqa: PLE0604
