"""optax's Adafactor (``optax.adafactor``; Shazeer & Stern 2018, "Adafactor: Adaptive Learning
Rates with Sublinear Memory Cost") and the transformations it chains, with optax's names,
arguments and update equations (``optax/_src/factorized.py``, ``alias.py``, ``clipping.py``,
``transform.py``): ``scale_by_factored_rms``, ``clip_by_block_rms``,
``scale_by_param_block_rms`` and ``ema``.

Statistics follow ``adamw``'s dtype rule (a parameter's dtype, float32 for bfloat16/float16
ones; optax keeps a bfloat16 parameter's in bfloat16); the updates come back in that dtype.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes, pytree
from blu.core.errors import BluValueError, with_user_line
from blu.optim.more_optimizers import (
    _abs_sq,
    _leaves_like_updates,
    _optimizer,
    _scale_by_lr,
    _zip_map,
)
from blu.optim.optimizers import (
    GradientTransformation,
    Optimizer,
    Schedule,
    _moment_dtype,
    _step0,
)
from blu.optim.transforms import EmptyState, add_decayed_weights, scale

__all__ = [
    "EmaState",
    "FactoredState",
    "adafactor",
    "clip_by_block_rms",
    "ema",
    "scale_by_factored_rms",
    "scale_by_param_block_rms",
]


class FactoredState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_factored_rms` (optax's): the count, the row and
    column statistics of the factored leaves and the full ones of the others (a leaf's unused
    entries are zeros of shape ``(1,)``, as optax's)."""

    count: Any  # int32 scalar: updates so far
    v_row: Any
    v_col: Any
    v: Any


class EmaState(NamedTuple):
    """The state of :func:`blu.optim.ema` (optax's): the count and the moving average."""

    count: Any
    ema: Any


def _factored_dims(shape: tuple, factored: bool, min_dim_size_to_factor: int):
    """The two largest axes ``(d1, d0)`` (``d0`` the largest) where ``factored``, the leaf has
    rank >= 2 and the second largest has at least ``min_dim_size_to_factor`` entries, else None
    (optax's ``_factored_dims``, the same ``np.argsort`` tie order)."""
    if not factored or len(shape) < 2:
        return None
    sorted_dims = np.argsort(shape)
    if shape[sorted_dims[-2]] < min_dim_size_to_factor:
        return None
    return int(sorted_dims[-2]), int(sorted_dims[-1])


def _rms(x: Any) -> Any:
    """``sqrt(mean(|x|^2))`` over every entry (NaN for an empty ``x``, as optax's)."""
    return bnp.sqrt(bnp.mean(_abs_sq(x)))


def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: float = 0.8,
    step_offset: int = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: float = 1e-30,
    decay_rate_fn: Any = None,
) -> GradientTransformation:
    """Adafactor's rescaling, as ``optax.scale_by_factored_rms``. With
    ``beta = decay_rate_fn(count - step_offset, decay_rate)`` (default
    ``1 - (count - step_offset + 1) ** -decay_rate``, in float32) and ``s = |g|^2 + epsilon``:

    - a factored leaf (see ``min_dim_size_to_factor``; ``d0`` its largest axis, ``d1`` the next):
      ``v_row = beta v_row + (1 - beta) mean(s, d0)``, ``v_col = beta v_col + (1 - beta)
      mean(s, d1)``, and the update ``g * (v_row / mean(v_row, d1))^-1/2 * v_col^-1/2`` (each
      broadcast back over its reduced axis);
    - another leaf: ``v = beta v + (1 - beta) s`` and the update ``g * v^-1/2``.

    Raises:
        BluValueError: ``update`` without ``params``.
    """

    def beta(step: Any) -> Any:
        if decay_rate_fn is not None:
            return bnp.asarray(decay_rate_fn(step - step_offset, decay_rate))
        t = (step - step_offset + 1).astype(dtypes.float32)
        return 1.0 - bnp.power(t, -float(decay_rate))

    def init(params: Any) -> FactoredState:
        rows, cols, vs = [], [], []
        leaves, treedef = pytree.tree_flatten(params)
        for p in leaves:
            p = bnp.asarray(p)
            md = _moment_dtype(p.dtype)
            one = lax.full((1,), 0, md)
            dims = _factored_dims(p.shape, factored, min_dim_size_to_factor)
            if dims is None:
                rows.append(one), cols.append(one), vs.append(lax.full(p.shape, 0, md))
            else:
                d1, d0 = dims
                rows.append(lax.full(tuple(np.delete(p.shape, d0)), 0, md))
                cols.append(lax.full(tuple(np.delete(p.shape, d1)), 0, md))
                vs.append(one)
        unflat = lambda xs: pytree.tree_unflatten(treedef, xs)  # noqa: E731
        return FactoredState(_step0(), unflat(rows), unflat(cols), unflat(vs))

    def update(updates: Any, state: FactoredState, params: Any = None):
        if params is None:
            raise BluValueError(with_user_line("scale_by_factored_rms needs params in update"))
        step = bnp.asarray(state.count)
        b = beta(step)
        _leaves_like_updates(
            params, pytree.tree_structure(updates), "params", "scale_by_factored_rms"
        )

        def one(g: Any, v_row: Any, v_col: Any, v: Any, p: Any) -> tuple:
            p = bnp.asarray(p)
            md = _moment_dtype(p.dtype)
            g = bnp.asarray(g).astype(md)
            bt = b.astype(md)
            s = _abs_sq(g) + epsilon
            zero = lax.full((1,), 0, md)
            dims = _factored_dims(p.shape, factored, min_dim_size_to_factor)
            if dims is None:
                v = bt * bnp.asarray(v) + (1.0 - bt) * s
                return g * v**-0.5, zero, zero, v
            d1, d0 = dims
            v_row = bt * bnp.asarray(v_row) + (1.0 - bt) * bnp.mean(s, axis=d0)
            v_col = bt * bnp.asarray(v_col) + (1.0 - bt) * bnp.mean(s, axis=d1)
            reduced_d1 = d1 - 1 if d1 > d0 else d1
            row_factor = (v_row / bnp.mean(v_row, axis=reduced_d1, keepdims=True)) ** -0.5
            col_factor = v_col**-0.5
            out = g * bnp.expand_dims(row_factor, d0) * bnp.expand_dims(col_factor, d1)
            return out, v_row, v_col, zero

        out, (rows, cols, vs) = _zip_map(
            one,
            "scale_by_factored_rms",
            updates,
            state.v_row,
            state.v_col,
            state.v,
            params,
            n_out=4,
        )
        return out, FactoredState(step + 1, rows, cols, vs)

    return GradientTransformation(init, update)


def clip_by_block_rms(threshold: float) -> GradientTransformation:
    """Each leaf divided by ``max(1, rms(leaf) / threshold)`` (its root mean square at most
    ``threshold``), as ``optax.clip_by_block_rms``.

    Raises:
        BluValueError: ``threshold <= 0``.
    """
    if not threshold > 0:
        raise BluValueError(
            with_user_line(f"clip_by_block_rms: need threshold > 0, got {threshold}")
        )

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        def clip(u: Any) -> Any:
            u = bnp.asarray(u)
            return u / bnp.maximum(1.0, _rms(u) / threshold)

        return pytree.tree_map(clip, updates), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_param_block_rms(min_scale: float = 1e-3) -> GradientTransformation:
    """Each leaf times ``max(rms(param), min_scale)``, its parameter's root mean square, as
    ``optax.scale_by_param_block_rms``.

    Raises:
        BluValueError: ``update`` without ``params``.
    """

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise BluValueError(with_user_line("scale_by_param_block_rms needs params in update"))

        def one(u: Any, p: Any) -> tuple[Any]:
            u = bnp.asarray(u)
            return (u * bnp.maximum(_rms(bnp.asarray(p)), min_scale).astype(u.dtype),)

        out, _ = _zip_map(one, "scale_by_param_block_rms", updates, params, what="params", n_out=1)
        return out, state

    return GradientTransformation(lambda params: EmptyState(), update)


def ema(decay: float, debias: bool = True, accumulator_dtype: Any = None):
    """An exponential moving average of the updates, as ``optax.ema``:
    ``e = (1 - decay) * u + decay * e``; the updates are ``e`` (divided by ``1 - decay^count``
    where ``debias``). ``e`` is kept in ``accumulator_dtype`` (None: the parameters' moment
    dtype)."""
    acc = None if accumulator_dtype is None else bnp.dtype(accumulator_dtype)

    def init(params: Any) -> EmaState:
        def zeros(p: Any) -> Any:
            p = bnp.asarray(p)
            return lax.full(p.shape, 0, _moment_dtype(p.dtype) if acc is None else acc)

        return EmaState(_step0(), pytree.tree_map(zeros, params))

    def update(updates: Any, state: EmaState, params: Any = None):
        count = bnp.asarray(state.count) + 1

        def one(u: Any, e: Any) -> tuple[Any, Any]:
            u, e = bnp.asarray(u), bnp.asarray(e)
            new = (1.0 - decay) * u + decay * e
            out = new
            if debias:
                out = new / (
                    1.0 - bnp.power(bnp.asarray(decay, new.dtype), count.astype(new.dtype))
                )
            return out, new.astype(e.dtype)

        out, (new,) = _zip_map(one, "ema", updates, state.ema)
        return out, EmaState(count, new)

    return GradientTransformation(init, update)


def adafactor(
    learning_rate: float | Schedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: float = 0.8,
    decay_offset: int = 0,
    multiply_by_parameter_scale: float = True,
    clipping_threshold: float | None = 1.0,
    momentum: float | None = None,
    dtype_momentum: Any = dtypes.float32,
    weight_decay_rate: float | None = None,
    eps: float = 1e-30,
    factored: bool = True,
    weight_decay_mask: Any = None,
) -> Optimizer:
    """Adafactor (Shazeer & Stern 2018), as ``optax.adafactor``: the chain

    ``scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)``,
    ``clip_by_block_rms(clipping_threshold)`` (unless None), ``learning_rate`` (unless None:
    then the steps are the clipped directions themselves), ``scale_by_param_block_rms()``
    (where ``multiply_by_parameter_scale``), ``ema(momentum, debias=False,
    accumulator_dtype=dtype_momentum)`` (unless None), ``add_decayed_weights(weight_decay_rate,
    weight_decay_mask)`` (unless None), then ``scale(-1)``.

    A leaf of rank >= 2 whose second-largest axis has at least ``min_dim_size_to_factor``
    entries keeps row and column statistics (memory ``O(n + m)`` for an ``n x m`` matrix); the
    others a full second moment.

    Returns:
        An ``Optimizer``; its state is the tuple of the chain's states. ``update`` needs
        ``params``, as optax's.

    Raises:
        BluTypeError: ``init`` of parameters that are not floats.
        BluValueError: ``clipping_threshold <= 0``; ``update`` without ``params``.
    """
    tx = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
    if clipping_threshold is not None:
        tx.append(clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        tx.append(_scale_by_lr(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        tx.append(scale_by_param_block_rms())
    if momentum is not None:
        tx.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        tx.append(add_decayed_weights(weight_decay_rate, mask=weight_decay_mask))
    tx.append(scale(-1.0))
    return _optimizer("adafactor", *tx)
