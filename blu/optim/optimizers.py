"""blu.optim's optimizers (AdamW, Adam, SGD), gradient clipping and learning-rate schedules
over parameter pytrees, with optax's contract.

An ``Optimizer`` is a ``GradientTransformation`` (a pair of pure functions) with one more
method, ``step``::

    opt = blu.optim.adamw(blu.optim.warmup_cosine_decay(6e-4, 700, 19073), weight_decay=0.1,
                          mask=blu.optim.decay_mask_matrices)
    state = opt.init(params)
    updates, state = opt.update(grads, state, params)   # optax: the change to add
    params = blu.optim.apply_updates(params, updates)
    params, state = opt.step(grads, state, params)      # the same two lines in one call

The state is a pytree (a NamedTuple) whose ``step`` is an int32 scalar counting the updates
applied so far; schedules are functions of that (possibly traced) step, evaluated *before* it
is incremented (the first update uses ``schedule(0)``, as optax does).

Dtypes: moments are kept in each parameter's dtype, except that bfloat16/float16 parameters
get float32 moments (their update is computed in float32 and rounded once when stored).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes, pytree
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer

Schedule = Callable[[Any], Any]

__all__ = [
    "AdamState",
    "GradientTransformation",
    "Optimizer",
    "apply_updates",
    "SgdState",
    "adam",
    "adamw",
    "clip_grads_by_global_norm",
    "constant",
    "cosine_decay",
    "decay_mask_matrices",
    "global_norm",
    "linear_warmup",
    "sgd",
    "warmup_cosine_decay",
]


class GradientTransformation(NamedTuple):
    """optax's contract: ``init(params) -> state`` and
    ``update(updates, state, params=None) -> (new_updates, state)``; apply the result with
    ``apply_updates(params, updates)``."""

    init: Callable[[Any], Any]
    update: Callable[..., tuple[Any, Any]]


class Optimizer(NamedTuple):
    """A ``GradientTransformation`` whose ``update(grads, state, params)`` returns
    ``(updates, state)`` (optax's contract; the updates are ``-lr * direction``, in the
    parameters' moment dtype: float32 for bfloat16/float16 parameters), plus
    ``step(grads, state, params) -> (params, state)``, the update applied (rounded once into
    each parameter's dtype, so a bfloat16 parameter moves by the float32 update)."""

    init: Callable[[Any], Any]
    update: Callable[..., tuple[Any, Any]]
    step: Callable[[Any, Any, Any], tuple[Any, Any]]


def apply_updates(params: Any, updates: Any) -> Any:
    """``params + updates`` leaf by leaf, each result in its parameter's dtype (the sum computed
    in the wider of the two dtypes), as ``optax.apply_updates``; ``None`` leaves stay ``None``.

    Raises:
        BluValueError: the two trees differ in structure.
    """
    p_leaves, treedef = pytree.tree_flatten(params)
    u_leaves = _leaves_like(updates, treedef, "updates", "apply_updates")
    out = []
    for p, u in zip(p_leaves, u_leaves):
        p, u = bnp.asarray(p), bnp.asarray(u)
        out.append((p.astype(bnp.result_type(p.dtype, u.dtype)) + u).astype(p.dtype))
    return pytree.tree_unflatten(treedef, out)


def _with_step(init: Callable, update: Callable) -> Optimizer:
    def step(grads: Any, state: Any, params: Any) -> tuple[Any, Any]:
        updates, state = update(grads, state, params)
        return apply_updates(params, updates), state

    return Optimizer(init, update, step)


class AdamState(NamedTuple):
    """The state of :func:`blu.optim.adam` / :func:`blu.optim.adamw`: the step count and the
    first and second moments."""

    step: Any  # int32 scalar: updates applied so far
    mu: Any  # first moments (pytree like params)
    nu: Any  # second moments


class SgdState(NamedTuple):
    """The state of :func:`blu.optim.sgd`: the step count and the momentum buffers."""

    step: Any
    trace: Any  # momentum buffers (pytree like params), or None without momentum


def _moment_dtype(dtype: np.dtype) -> np.dtype:
    return dtypes.float32 if dtype in (dtypes.bfloat16, dtypes.float16) else dtype


def _check_float_params(params: Any, name: str) -> list[Any]:
    leaves = pytree.tree_leaves(params)
    for leaf in leaves:
        aval = bnp.asarray(leaf)
        if not dtypes.is_float(aval.dtype):
            raise BluTypeError(
                with_user_line(
                    f"optim.{name}: parameters must be floats, got a leaf of dtype {aval.dtype}"
                )
            )
    return leaves


def _zeros_like_moment(p: Any) -> Any:
    p = bnp.asarray(p)
    return lax.full(p.shape, 0, _moment_dtype(p.dtype))


def _step0() -> Any:
    return lax.full((), 0, dtypes.int32)


def _learning_rate(lr: float | Schedule, step: Any) -> Any:
    """The learning rate at ``step``: a Python float as given, a schedule's value as a float32
    scalar, or a traced scalar (a jit argument, as optax takes) as it is (cast per leaf)."""
    if callable(lr):
        return bnp.asarray(lr(step)).astype(dtypes.float32)
    if isinstance(lr, Tracer):
        return lr
    return float(lr)


def _cast(x: Any, dtype: np.dtype) -> Any:
    return x if isinstance(x, float) else x.astype(dtype)


def _resolve_mask(mask: Any, params: Any, name: str) -> list[bool]:
    """One Python bool per parameter leaf (True = apply weight decay)."""
    leaves = pytree.tree_leaves(params)
    if mask is None:
        return [True] * len(leaves)
    tree = mask(params) if callable(mask) else mask
    flags = pytree.tree_leaves(tree)
    if len(flags) != len(leaves):
        raise BluValueError(
            with_user_line(
                f"optim.{name}: the weight-decay mask has {len(flags)} leaves but params have "
                f"{len(leaves)}; give a pytree of bools with the params' structure"
            )
        )
    return [bool(f) for f in flags]


# ---- AdamW -------------------------------------------------------------------------------------


def adamw(
    learning_rate: float | Schedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    mask: Any = None,
    *,
    eps_root: float = 0.0,
) -> Optimizer:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019; Kingma & Ba 2015).

    Per leaf, with ``t = step + 1`` and ``lr = learning_rate(step)``::

        m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
        p = p - lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t) + eps_root) + eps) + weight_decay * p)

    (the decay term only where ``mask`` is True) — the same update as ``optax.adamw`` and
    ``torch.optim.AdamW``.

    Args:
        learning_rate: a float or a schedule ``step -> lr``.
        b1, b2: moment decay rates.
        eps: added to the root of the second moment.
        eps_root: added to the bias-corrected second moment inside the root (optax's; keeps
            the gradient of the update finite where ``v`` is 0, e.g. meta-learning).
        weight_decay: decoupled decay coefficient (multiplied by the learning rate).
        mask: which leaves decay: a pytree of bools with the params' structure, or a callable
            ``params -> that pytree`` (e.g. ``decay_mask_matrices``); None: all leaves.

    Returns:
        An ``Optimizer`` whose state is an ``AdamState``; ``update`` returns the updates
        ``-lr * (...)`` above, ``step`` the new parameters. ``update(grads, state)`` without
        ``params`` (optax's default) is allowed where ``weight_decay`` is 0, else a
        ``BluValueError``.
    """
    if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
        raise BluValueError(with_user_line(f"optim.adamw: need 0 <= b1, b2 < 1, got {b1}, {b2}"))

    def init(params: Any) -> AdamState:
        _check_float_params(params, "adamw")
        mu = pytree.tree_map(_zeros_like_moment, params)
        nu = pytree.tree_map(_zeros_like_moment, params)
        return AdamState(_step0(), mu, nu)

    def update(grads: Any, state: AdamState, params: Any = None) -> tuple[Any, AdamState]:
        p_leaves, g_leaves, treedef = _params_and_grads(params, grads, weight_decay, "adamw")
        m_leaves = _leaves_like(state.mu, treedef, "state.mu", "adamw")
        v_leaves = _leaves_like(state.nu, treedef, "state.nu", "adamw")
        decays = [False] * len(g_leaves) if params is None else _resolve_mask(mask, params, "adamw")
        step = bnp.asarray(state.step)
        lr = _learning_rate(learning_rate, step)
        t = step + 1
        corrections: dict[np.dtype, tuple[Any, Any]] = {}  # per moment dtype, made once

        def bias_corrections(md: np.dtype) -> tuple[Any, Any]:
            if md not in corrections:
                tt = t.astype(md)
                bc1 = 1.0 - bnp.power(bnp.asarray(b1, md), tt)
                bc2 = 1.0 - bnp.power(bnp.asarray(b2, md), tt)
                corrections[md] = (bc1, bc2)
            return corrections[md]

        new_p, new_m, new_v = [], [], []
        for p, g, m, v, decay in zip(p_leaves, g_leaves, m_leaves, v_leaves, decays):
            p, g = None if p is None else bnp.asarray(p), bnp.asarray(g)
            m, v = bnp.asarray(m), bnp.asarray(v)
            md = m.dtype
            g = g.astype(md)
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * (g * g)
            bc1, bc2 = bias_corrections(md)
            m_hat = m / bc1
            v_hat = v / bc2 if not eps_root else v / bc2 + eps_root
            u = m_hat / (bnp.sqrt(v_hat) + eps)
            p32 = None if p is None else p.astype(md)
            if decay and weight_decay != 0.0:
                u = u + weight_decay * p32
            new_p.append(-(_cast(lr, md) * u))
            new_m.append(m)
            new_v.append(v)
        unflat = lambda xs: pytree.tree_unflatten(treedef, xs)
        new_state = AdamState(step + 1, unflat(new_m), unflat(new_v))
        return unflat(new_p), new_state

    return _with_step(init, update)


def adam(
    learning_rate: float | Schedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> Optimizer:
    """Adam (Kingma & Ba 2015): ``adamw`` without weight decay (``optax.adam``'s arguments)."""
    return adamw(learning_rate, b1, b2, eps, weight_decay=0.0, eps_root=eps_root)


def decay_mask_matrices(params: Any) -> Any:
    """A weight-decay mask: True for leaves with ``ndim >= 2`` (matrices, embeddings), False for
    biases and normalization scales (the usual GPT-2 choice)."""
    return pytree.tree_map(lambda p: bnp.asarray(p).ndim >= 2, params)


def _params_and_grads(
    params: Any, grads: Any, weight_decay: Any, name: str
) -> tuple[list[Any], list[Any], Any]:
    """The parameter leaves (Nones where ``params`` is None: optax's ``update(grads, state)``,
    allowed without weight decay), the gradient leaves and their structure."""
    if params is None:
        if weight_decay != 0.0:
            raise BluValueError(
                with_user_line(
                    f"optim.{name}: update needs params for weight_decay={weight_decay}; call "
                    "update(grads, state, params)"
                )
            )
        g_leaves, treedef = pytree.tree_flatten(grads)
        return [None] * len(g_leaves), g_leaves, treedef
    p_leaves, treedef = pytree.tree_flatten(params)
    return p_leaves, _leaves_like(grads, treedef, "grads", name), treedef


def _leaves_like(tree: Any, treedef: Any, what: str, name: str) -> list[Any]:
    leaves, td = pytree.tree_flatten(tree)
    if td != treedef:
        raise BluValueError(
            with_user_line(f"optim.{name}: {what} has structure {td} but params have {treedef}")
        )
    return leaves


# ---- SGD ---------------------------------------------------------------------------------------


def sgd(
    learning_rate: float | Schedule,
    momentum: float | None = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
) -> Optimizer:
    """Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay, as
    ``torch.optim.SGD`` (dampening 0)::

        g = g + weight_decay * p;   b = momentum * b + g
        p = p - lr * (g + momentum * b if nesterov else b)

    Args:
        learning_rate: a float or a schedule ``step -> lr``.
        momentum: momentum coefficient (0 or None, optax's default: plain SGD, and no
            buffers are kept).
        nesterov: Nesterov momentum (Sutskever et al. 2013).
        weight_decay: L2 coefficient added to the gradient (coupled, unlike ``adamw``).

    Returns:
        An ``Optimizer`` whose state is an ``SgdState``. ``update(grads, state)`` without
        ``params`` (optax's default) is allowed where ``weight_decay`` is 0 (the update then
        takes the gradients' dtype rule), else a ``BluValueError``.
    """
    if momentum is None:
        momentum = 0.0
    if momentum < 0.0 or (nesterov and momentum == 0.0):
        raise BluValueError(
            with_user_line(f"optim.sgd: need momentum >= 0 (> 0 for nesterov), got {momentum}")
        )

    def init(params: Any) -> SgdState:
        _check_float_params(params, "sgd")
        trace = pytree.tree_map(_zeros_like_moment, params) if momentum else None
        return SgdState(_step0(), trace)

    def update(grads: Any, state: SgdState, params: Any = None) -> tuple[Any, SgdState]:
        p_leaves, g_leaves, treedef = _params_and_grads(params, grads, weight_decay, "sgd")
        b_leaves = (
            _leaves_like(state.trace, treedef, "state.trace", "sgd")
            if momentum
            else [None] * len(p_leaves)
        )
        step = bnp.asarray(state.step)
        lr = _learning_rate(learning_rate, step)
        new_p, new_b = [], []
        for p, g, b in zip(p_leaves, g_leaves, b_leaves):
            if p is None:  # optax's params=None: the gradient's dtype rule
                g = bnp.asarray(g)
                md = _moment_dtype(g.dtype)
                p32, g = None, g.astype(md)
            else:
                p, g = bnp.asarray(p), bnp.asarray(g)
                md = _moment_dtype(p.dtype)
                p32, g = p.astype(md), g.astype(md)
            if weight_decay:
                g = g + weight_decay * p32
            if momentum:
                b = momentum * b + g
                g = g + momentum * b if nesterov else b
                new_b.append(b)
            new_p.append(-(_cast(lr, md) * g))
        trace = pytree.tree_unflatten(treedef, new_b) if momentum else None
        return pytree.tree_unflatten(treedef, new_p), SgdState(step + 1, trace)

    return _with_step(init, update)


# ---- clipping ----------------------------------------------------------------------------------


def global_norm(tree: Any) -> Any:
    """``sqrt(sum of |x|^2 over every entry of every leaf)``, accumulated in float32 (float64
    when a leaf is float64 or complex128); a complex entry counts ``re^2 + im^2``, as optax.

    Returns:
        A float scalar (0 for an empty tree).
    """
    leaves = [bnp.asarray(x) for x in pytree.tree_leaves(tree)]
    if not leaves:
        return lax.full((), 0.0, dtypes.float32)
    wide = (dtypes.float64, dtypes.complex128)
    acc = dtypes.float64 if any(x.dtype in wide for x in leaves) else dtypes.float32
    total = None
    for x in leaves:
        if dtypes.is_complex(x.dtype):  # casting to a real dtype would drop the imaginary part
            re, im = bnp.real(x).astype(acc), bnp.imag(x).astype(acc)
            s = bnp.sum(re * re + im * im)
        else:
            x = x.astype(acc)
            s = bnp.sum(x * x)
        total = s if total is None else total + s
    return bnp.sqrt(total)


def _no_bound(max_norm: Any) -> bool:
    """Whether ``max_norm`` is a concrete +inf (clipping to it changes nothing)."""
    return isinstance(max_norm, (int, float, np.number)) and math.isinf(max_norm)


def _clip_factor(norm: Any, max_norm: Any) -> Any:
    """``min(1, max_norm / norm)``: a Python number as ``max_norm / max(norm, max_norm)``; an
    array one (a jit argument) by optax's select, which keeps the updates where ``norm <
    max_norm``, an infinite ``max_norm`` included (the quotient would be ``inf / inf = NaN``)."""
    if isinstance(max_norm, (int, float, np.number)):
        return max_norm / bnp.maximum(norm, max_norm)  # 1 when norm <= max_norm; no 0/0
    keep = norm < max_norm
    return bnp.where(keep, 1.0, max_norm / bnp.where(keep, 1.0, norm)).astype(norm.dtype)


def clip_grads_by_global_norm(grads: Any, max_norm: float) -> tuple[Any, Any]:
    """Scale ``grads`` so their global norm is at most ``max_norm``.

    Args:
        grads: a pytree of float or complex arrays (a complex entry counts ``|z|^2``).
        max_norm: the largest allowed global norm (> 0).

    Returns:
        ``(clipped, norm)``: ``grads * min(1, max_norm / norm)`` (each leaf keeps its dtype)
        and the global norm before clipping; ``max_norm = inf`` (a number or an array, e.g. a
        jit argument) leaves ``grads`` unchanged.
    """
    if not isinstance(max_norm, Tracer) and not max_norm > 0:  # a traced one: as optax, unchecked
        raise BluValueError(
            with_user_line(f"optim.clip_by_global_norm: max_norm must be > 0, got {max_norm}")
        )
    norm = global_norm(grads)
    if _no_bound(max_norm):  # inf / max(norm, inf) would be inf / inf = NaN
        return pytree.tree_map(bnp.asarray, grads), norm
    scale = _clip_factor(norm, max_norm)

    def clip(g: Any) -> Any:
        g = bnp.asarray(g)
        md = _moment_dtype(g.dtype)
        return (g.astype(md) * scale.astype(md)).astype(g.dtype)

    return pytree.tree_map(clip, grads), norm


# ---- schedules ---------------------------------------------------------------------------------


def _step_f32(step: Any) -> Any:
    return bnp.asarray(step).astype(dtypes.float32)


def constant(lr: float) -> Schedule:
    """``step -> lr``."""

    def schedule(step: Any) -> Any:
        return lax.full((), lr, dtypes.float32)

    return schedule


def linear_warmup(peak: float, warmup_steps: int, init_lr: float = 0.0) -> Schedule:
    """Linear from ``init_lr`` at step 0 to ``peak`` at ``warmup_steps``, then ``peak``:
    ``lr(s) = init + (peak - init) * min(s, W) / W`` (``peak`` for ``W = 0``)."""
    if warmup_steps < 0:
        raise BluValueError(with_user_line(f"optim.linear_warmup: warmup_steps {warmup_steps} < 0"))

    def schedule(step: Any) -> Any:
        s = _step_f32(step)
        if warmup_steps == 0:
            return lax.full((), peak, dtypes.float32)
        frac = bnp.minimum(s, float(warmup_steps)) / float(warmup_steps)
        return init_lr + (peak - init_lr) * frac

    return schedule


def cosine_decay(init_lr: float, decay_steps: int, end_lr: float = 0.0) -> Schedule:
    """Half a cosine from ``init_lr`` at step 0 to ``end_lr`` at ``decay_steps``, then ``end_lr``
    (Loshchilov & Hutter 2017, without restarts):
    ``lr(s) = end + (init - end) * (1 + cos(pi * min(s, D) / D)) / 2``."""
    if decay_steps <= 0:
        raise BluValueError(with_user_line(f"optim.cosine_decay: decay_steps {decay_steps} <= 0"))

    def schedule(step: Any) -> Any:
        frac = bnp.clip(_step_f32(step) / float(decay_steps), 0.0, 1.0)
        return end_lr + (init_lr - end_lr) * 0.5 * (1.0 + bnp.cos(math.pi * frac))

    return schedule


def warmup_cosine_decay(
    peak_lr: float,
    warmup_steps: int,
    total_steps: int,
    end_lr: float = 0.0,
    init_lr: float = 0.0,
) -> Schedule:
    """Linear warmup then cosine decay (as ``optax.warmup_cosine_decay_schedule``)::

        s < W:   init + (peak - init) * s / W
        s >= W:  end + (peak - end) * (1 + cos(pi * min(s - W, T - W) / (T - W))) / 2

    with ``W = warmup_steps``, ``T = total_steps`` (the step at which ``end_lr`` is reached).
    """
    if not 0 <= warmup_steps <= total_steps:
        raise BluValueError(
            with_user_line(
                f"optim.warmup_cosine_decay: need 0 <= warmup_steps <= total_steps, got "
                f"{warmup_steps}, {total_steps}"
            )
        )
    warm = linear_warmup(peak_lr, warmup_steps, init_lr)
    decay_steps = max(1, total_steps - warmup_steps)
    cos = cosine_decay(peak_lr, decay_steps, end_lr)

    def schedule(step: Any) -> Any:
        s = _step_f32(step)
        return bnp.where(s < float(warmup_steps), warm(s), cos(s - float(warmup_steps)))

    return schedule
