"""optax-style gradient transformations to compose with ``chain``:

    opt = blu.optim.chain(
        blu.optim.clip_by_global_norm(1.0),
        blu.optim.scale_by_adam(b1=0.9, b2=0.95),
        blu.optim.add_decayed_weights(0.1, mask=blu.optim.decay_mask_matrices),
        blu.optim.scale_by_learning_rate(schedule),
    )
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)
    params = blu.optim.apply_updates(params, updates)

Each is a ``GradientTransformation`` (``init(params)``, ``update(updates, state, params)``)
with optax's semantics; ``masked`` applies one to the leaves a mask selects. Moments follow
``adamw``'s dtype rule (float32 for bfloat16/float16 leaves). ``chain(...)`` of
``scale_by_adam``, ``add_decayed_weights`` and ``scale_by_learning_rate`` is ``adamw``
(``optax.adamw`` is the same chain).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import blu.numpy as bnp
from blu.core import dtypes, pytree
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import Tracer
from blu.optim.optimizers import (
    GradientTransformation,
    Schedule,
    _clip_factor,
    _leaves_like,
    _moment_dtype,
    _no_bound,
    _resolve_mask,
    _step0,
    _zeros_like_moment,
    clip_grads_by_global_norm,
    constant,
    cosine_decay,
    global_norm,
    warmup_cosine_decay,
)

__all__ = [
    "EmptyState",
    "ScaleByAdamState",
    "ScaleByScheduleState",
    "add_decayed_weights",
    "chain",
    "clip_by_global_norm",
    "clip_by_global_norm_transform",
    "constant_schedule",
    "cosine_decay_schedule",
    "exponential_decay",
    "identity",
    "join_schedules",
    "linear_schedule",
    "masked",
    "piecewise_constant_schedule",
    "scale",
    "scale_by_adam",
    "scale_by_learning_rate",
    "scale_by_schedule",
    "warmup_cosine_decay_schedule",
]


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


class ScaleByAdamState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_adam` (optax's): the count and the moments."""

    count: Any  # int32 scalar: updates so far
    mu: Any
    nu: Any


class ScaleByScheduleState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_schedule`: the count of updates so far."""

    count: Any


def _map(fn: Callable, *trees: Any) -> Any:
    leaves, treedef = pytree.tree_flatten(trees[0])
    rest = [_leaves_like(t, treedef, "a tree", "chain") for t in trees[1:]]
    return pytree.tree_unflatten(treedef, [fn(*xs) for xs in zip(leaves, *rest)])


def identity() -> GradientTransformation:
    """Updates unchanged."""
    return GradientTransformation(lambda params: EmptyState(), lambda u, s, p=None: (u, s))


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply ``transforms`` in order (each one's updates are the next one's input); the state is
    the tuple of their states."""

    def init(params: Any) -> tuple:
        return tuple(t.init(params) for t in transforms)

    def update(updates: Any, state: tuple, params: Any = None) -> tuple[Any, tuple]:
        if len(state) != len(transforms):
            raise BluValueError(
                with_user_line(
                    f"chain: state has {len(state)} parts for {len(transforms)} transforms"
                )
            )
        new = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new.append(s)
        return updates, tuple(new)

    return GradientTransformation(init, update)


def scale(step_size: float) -> GradientTransformation:
    """Updates times ``step_size``."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        return _map(lambda u: bnp.asarray(u) * step_size, updates), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_schedule(schedule: Schedule) -> GradientTransformation:
    """Updates times ``schedule(count)`` (``count`` the updates so far, from 0)."""

    def update(updates: Any, state: ScaleByScheduleState, params: Any = None):
        s = bnp.asarray(schedule(state.count))
        out = _map(lambda u: bnp.asarray(u) * s.astype(bnp.asarray(u).dtype), updates)
        return out, ScaleByScheduleState(state.count + 1)

    return GradientTransformation(lambda params: ScaleByScheduleState(_step0()), update)


def scale_by_learning_rate(learning_rate: float | Schedule, *, flip_sign: bool = True):
    """Updates times ``-learning_rate`` (a float or a schedule of the count), as optax."""
    sign = -1.0 if flip_sign else 1.0
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def scale_by_adam(
    b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0
) -> GradientTransformation:
    """Adam's direction ``m_hat / (sqrt(v_hat + eps_root) + eps)`` (Kingma & Ba 2015), as
    ``optax.scale_by_adam``; moments in float32 for bfloat16/float16 leaves."""

    def init(params: Any) -> ScaleByAdamState:
        z = pytree.tree_map(_zeros_like_moment, params)
        return ScaleByAdamState(_step0(), z, pytree.tree_map(_zeros_like_moment, params))

    def update(updates: Any, state: ScaleByAdamState, params: Any = None):
        t = bnp.asarray(state.count) + 1

        def one(g: Any, m: Any, v: Any) -> tuple[Any, Any, Any]:
            m, v = bnp.asarray(m), bnp.asarray(v)
            g = bnp.asarray(g).astype(m.dtype)
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * (g * g)
            tt = t.astype(m.dtype)
            bc1 = 1.0 - bnp.power(bnp.asarray(b1, m.dtype), tt)
            bc2 = 1.0 - bnp.power(bnp.asarray(b2, m.dtype), tt)
            m_hat = m / bc1
            v_hat = v / bc2 if not eps_root else v / bc2 + eps_root
            return m_hat / (bnp.sqrt(v_hat) + eps), m, v

        leaves, treedef = pytree.tree_flatten(updates)
        ms = _leaves_like(state.mu, treedef, "state.mu", "scale_by_adam")
        vs = _leaves_like(state.nu, treedef, "state.nu", "scale_by_adam")
        outs = [one(g, m, v) for g, m, v in zip(leaves, ms, vs)]
        unflat = lambda k: pytree.tree_unflatten(treedef, [o[k] for o in outs])  # noqa: E731
        return unflat(0), ScaleByAdamState(t, unflat(1), unflat(2))

    return GradientTransformation(init, update)


def add_decayed_weights(weight_decay: float = 0.0, mask: Any = None) -> GradientTransformation:
    """Updates plus ``weight_decay * params`` (on the leaves ``mask`` selects: a pytree of bools
    or a callable ``params -> that``), as ``optax.add_decayed_weights``.

    Raises:
        BluValueError: ``update`` is called without ``params``.
    """

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise BluValueError(with_user_line("add_decayed_weights needs params in update"))
        flags = _resolve_mask(mask, params, "add_decayed_weights")
        u_leaves, treedef = pytree.tree_flatten(updates)
        p_leaves = _leaves_like(params, treedef, "params", "add_decayed_weights")
        out = []
        for u, p, f in zip(u_leaves, p_leaves, flags):
            u = bnp.asarray(u)
            out.append(u + weight_decay * bnp.asarray(p).astype(u.dtype) if f else u)
        return pytree.tree_unflatten(treedef, out), state

    return GradientTransformation(lambda params: EmptyState(), update)


def clip_by_global_norm_transform(max_norm: float) -> GradientTransformation:
    """Scale the updates so their global norm is at most ``max_norm`` (``optax``'s
    ``clip_by_global_norm(max_norm)``; ``blu.optim.clip_by_global_norm(max_norm)`` returns it).

    ``max_norm = inf`` (a number or an array, e.g. a jit argument) passes the updates unchanged
    (as optax's, for a finite norm).

    Raises:
        BluValueError: ``max_norm <= 0``.
    """
    if not isinstance(max_norm, Tracer) and not max_norm > 0:  # a traced one: as optax, unchecked
        raise BluValueError(with_user_line(f"clip_by_global_norm: max_norm {max_norm} <= 0"))
    if _no_bound(max_norm):  # inf / max(norm, inf) would be inf / inf = NaN
        return identity()

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        norm = global_norm(updates)
        factor = _clip_factor(norm, max_norm)

        def clip(g: Any) -> Any:
            g = bnp.asarray(g)
            md = _moment_dtype(g.dtype)
            return (g.astype(md) * factor.astype(md)).astype(g.dtype)

        return _map(clip, updates), state

    return GradientTransformation(lambda params: EmptyState(), update)


def clip_by_global_norm(*args: Any) -> Any:
    """Clip to a global norm, in either of two forms:

    - ``clip_by_global_norm(max_norm)`` (optax's): a ``GradientTransformation`` that scales the
      updates so their global norm is at most ``max_norm`` (for ``chain``);
    - ``clip_by_global_norm(grads, max_norm)``: ``(clipped, norm)`` at once, as
      ``clip_grads_by_global_norm``.

    Raises:
        BluValueError: ``max_norm <= 0``, or not one or two arguments.
    """
    if len(args) == 1:
        return clip_by_global_norm_transform(args[0])
    if len(args) == 2:
        return clip_grads_by_global_norm(*args)
    raise BluValueError(
        with_user_line(
            "optim.clip_by_global_norm takes (max_norm) (a transformation) or (grads, max_norm), "
            f"got {len(args)} arguments"
        )
    )


class MaskedState(NamedTuple):
    inner_state: Any


def masked(inner: GradientTransformation, mask: Any) -> GradientTransformation:
    """``inner`` applied to the leaves ``mask`` selects (a pytree of bools with the params'
    structure, or a callable ``params -> that``); the other leaves' updates pass unchanged, as
    ``optax.masked``. The inner state holds only the selected leaves (a list)."""

    def pick(tree: Any, flags: list[bool]) -> list:
        return [x for x, f in zip(pytree.tree_leaves(tree), flags) if f]

    def init(params: Any) -> MaskedState:
        flags = _resolve_mask(mask, params, "masked")
        return MaskedState(inner.init(pick(params, flags)))

    def update(updates: Any, state: MaskedState, params: Any = None):
        flags = _resolve_mask(mask, updates if params is None else params, "masked")
        u_leaves, treedef = pytree.tree_flatten(updates)
        sub_p = None if params is None else pick(params, flags)
        sub_u, inner_state = inner.update(pick(updates, flags), state.inner_state, sub_p)
        it = iter(sub_u)
        out = [next(it) if f else u for u, f in zip(u_leaves, flags)]
        return pytree.tree_unflatten(treedef, out), MaskedState(inner_state)

    return GradientTransformation(init, update)


# ---- optax's schedule names --------------------------------------------------------------------


def constant_schedule(value: float) -> Schedule:
    """``count -> value`` (``optax.constant_schedule``)."""
    return constant(value)


def linear_schedule(init_value: float, end_value: float, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:  # fmt: skip
    """Linear from ``init_value`` to ``end_value`` over ``transition_steps`` counts after
    ``transition_begin``, then ``end_value`` (``optax.linear_schedule``); ``init_value``
    throughout where ``transition_steps <= 0``, and a negative ``transition_begin`` taken as 0,
    as optax."""
    if transition_steps <= 0:
        return lambda count: bnp.full((), init_value, dtypes.float32)
    transition_begin = max(transition_begin, 0)

    def schedule(count: Any) -> Any:
        c = bnp.asarray(count).astype(dtypes.float32) - float(transition_begin)
        frac = bnp.clip(c / float(transition_steps), 0.0, 1.0)
        return init_value + (end_value - init_value) * frac

    return schedule


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> Schedule:
    """Cosine from ``init_value`` to ``alpha * init_value`` over ``decay_steps``
    (``optax.cosine_decay_schedule``): ``init * ((1 - alpha) * c ** exponent + alpha)`` with
    ``c = (1 + cos(pi * min(count, decay_steps) / decay_steps)) / 2``."""
    if exponent == 1.0:
        return cosine_decay(init_value, decay_steps, alpha * init_value)
    half_cosine = cosine_decay(1.0, decay_steps, 0.0)
    return lambda count: init_value * ((1.0 - alpha) * half_cosine(count) ** exponent + alpha)


def warmup_cosine_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then cosine
    decay to ``end_value`` at ``decay_steps`` (the total, warmup included), as
    ``optax.warmup_cosine_decay_schedule``; blu's ``warmup_cosine_decay`` with optax's
    argument names. ``exponent`` raises the cosine factor to that power, as optax's
    (``cosine_decay_schedule``'s ``alpha = end_value / peak_value``, 0 for a zero peak)."""
    plain = warmup_cosine_decay(peak_value, warmup_steps, decay_steps, end_value, init_value)
    if exponent == 1.0:
        return plain
    alpha = 0.0 if peak_value == 0 else end_value / peak_value
    warm = linear_schedule(init_value, peak_value, warmup_steps)
    cos = cosine_decay_schedule(peak_value, max(1, decay_steps - warmup_steps), alpha, exponent)
    return join_schedules([warm, cos], [warmup_steps])


def exponential_decay(
    init_value: float,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> Schedule:
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)`` after
    ``transition_begin`` (``init_value`` before), the exponent floored where ``staircase``, and
    bounded by ``end_value`` (a floor when ``decay_rate < 1``, else a ceiling), as
    ``optax.exponential_decay``; ``init_value`` throughout where ``transition_steps <= 0`` or
    ``decay_rate == 0``, and a negative ``transition_begin`` taken as 0."""
    if transition_steps <= 0 or decay_rate == 0:
        return constant(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count: Any) -> Any:
        c = bnp.asarray(count).astype(dtypes.float32) - float(transition_begin)
        p = c / float(transition_steps)
        if staircase:
            p = bnp.floor(p)
        v = bnp.where(c <= 0, init_value, init_value * bnp.power(float(decay_rate), p))
        if end_value is not None:
            v = bnp.maximum(v, end_value) if decay_rate < 1.0 else bnp.minimum(v, end_value)
        return v

    return schedule


def piecewise_constant_schedule(
    init_value: float, boundaries_and_scales: dict[int, float] | None = None
) -> Schedule:
    """``init_value`` times every ``scale`` whose boundary the count has reached
    (``count >= boundary``), as ``optax.piecewise_constant_schedule``'s code.

    Raises:
        BluValueError: a negative scale.
    """
    items = sorted((boundaries_and_scales or {}).items())
    if any(not scale >= 0 for _, scale in items):
        raise BluValueError(
            with_user_line(
                f"piecewise_constant_schedule: scales must be >= 0, got {boundaries_and_scales}"
            )
        )

    def schedule(count: Any) -> Any:
        c = bnp.asarray(count)
        v = bnp.full((), init_value, dtypes.float32)
        for boundary, scale in items:
            v = bnp.where(c >= boundary, v * scale, v)
        return v

    return schedule


def join_schedules(schedules: list[Schedule], boundaries: list[int]) -> Schedule:
    """``schedules[0]`` until ``boundaries[0]``, then ``schedules[i + 1](count - boundaries[i])``
    from ``boundaries[i]`` on (each one restarts its count at its boundary), as
    ``optax.join_schedules``.

    Raises:
        BluValueError: not one boundary fewer than schedules.
    """
    schedules, boundaries = list(schedules), list(boundaries)
    if not schedules or len(boundaries) != len(schedules) - 1:
        raise BluValueError(
            with_user_line(
                f"join_schedules: needs one boundary fewer than schedules, got "
                f"{len(schedules)} schedules and {len(boundaries)} boundaries"
            )
        )

    def schedule(count: Any) -> Any:
        c = bnp.asarray(count)
        out = schedules[0](c)
        for boundary, sched in zip(boundaries, schedules[1:]):
            out = bnp.where(c < boundary, out, sched(c - boundary))
        return out

    return schedule
