"""blu.optim with optax's contract: ``update`` returns updates, ``apply_updates`` adds them,
``step`` does both; ``chain`` / ``scale_by_adam`` / ``add_decayed_weights`` /
``scale_by_learning_rate`` / ``clip_by_global_norm(max_norm)`` / ``masked`` and optax's schedule
names. Checked against a float64 numpy AdamW and by training the README's GPT-2 example (tiny
config) both ways to the same losses."""

from __future__ import annotations

import math

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import optim
from blu.core import pytree

RNG = np.random.default_rng(3)
PARAMS = {
    "w": RNG.normal(size=(3, 4)).astype(np.float32),
    "b": RNG.normal(size=4).astype(np.float32),
}
GRADS = [
    {"w": RNG.normal(size=(3, 4)).astype(np.float32), "b": RNG.normal(size=4).astype(np.float32)}
    for _ in range(5)
]
MASK = {"w": True, "b": False}


def _adamw64(params, grads_seq, lr, b1, b2, eps, wd, mask, clip=None):
    """AdamW in float64 numpy (optax.adamw's / torch's update), with optional global clipping."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, g in enumerate(grads_seq, start=1):
        g = {k: x.astype(np.float64) for k, x in g.items()}
        if clip is not None:
            norm = math.sqrt(sum((x * x).sum() for x in g.values()))
            g = {k: x * min(1.0, clip / norm) for k, x in g.items()}
        rate = lr(t - 1) if callable(lr) else lr
        for k in p:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            u = m[k] / (1 - b1**t) / (np.sqrt(v[k] / (1 - b2**t)) + eps)
            if mask[k]:
                u = u + wd * p[k]
            p[k] = p[k] - rate * u
    return p


def _close(a, b, **kw):
    for x, y in zip(pytree.tree_leaves(a), pytree.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), **kw)


def test_update_returns_updates_and_step_applies_them():
    opt = optim.adamw(1e-2, weight_decay=0.1, mask=MASK)
    s1 = s2 = opt.init(PARAMS)
    p1 = p2 = PARAMS
    for g in GRADS:
        updates, s1 = opt.update(g, s1, p1)
        # the updates are the change, not the new parameters
        assert float(bnp.max(bnp.abs(updates["w"]))) < 0.05
        p1 = optim.apply_updates(p1, updates)
        p2, s2 = opt.step(g, s2, p2)
    _close(p1, p2, rtol=0, atol=0)  # bit for bit
    _close(s1, s2, rtol=0, atol=0)
    want = _adamw64(PARAMS, GRADS, 1e-2, 0.9, 0.999, 1e-8, 0.1, MASK)
    _close(p1, want, rtol=2e-5, atol=1e-6)


def test_update_without_params_where_nothing_needs_them():
    # optax's update(updates, state, params=None): adam and sgd without weight decay need no
    # params (it was Python's TypeError for the missing argument)
    for opt, want_fn in [
        (optim.adam(1e-2), lambda: _adamw64(PARAMS, GRADS, 1e-2, 0.9, 0.999, 1e-8, 0.0, MASK)),
        (optim.sgd(0.1, momentum=0.9), None),
    ]:
        s, p = opt.init(PARAMS), PARAMS
        for g in GRADS:
            updates, s = opt.update(g, s)
            p = optim.apply_updates(p, updates)
        if want_fn is None:  # heavy-ball SGD in float64
            want = {k: v.astype(np.float64) for k, v in PARAMS.items()}
            buf = {k: np.zeros_like(v) for k, v in want.items()}
            for g in GRADS:
                for k in want:
                    buf[k] = 0.9 * buf[k] + g[k]
                    want[k] = want[k] - 0.1 * buf[k]
        else:
            want = want_fn()
        _close(p, want, rtol=2e-5, atol=1e-6)
    for opt in [optim.adamw(1e-2, weight_decay=0.1), optim.sgd(0.1, weight_decay=0.1)]:
        with pytest.raises(blu.errors.BluValueError, match="params"):
            opt.update(GRADS[0], opt.init(PARAMS))


def test_chain_equals_adamw_with_schedule_and_clipping():
    sched = optim.warmup_cosine_decay_schedule(0.0, 3e-2, 2, 5, end_value=1e-3)
    chained = optim.chain(
        optim.clip_by_global_norm(1.0),
        optim.scale_by_adam(b1=0.8, b2=0.95, eps=1e-7),
        optim.add_decayed_weights(0.05, mask=optim.decay_mask_matrices),
        optim.scale_by_learning_rate(sched),
    )
    step = blu.jit(
        lambda g, s, p: (lambda u, s2: (optim.apply_updates(p, u), s2))(*chained.update(g, s, p))
    )
    p, s = PARAMS, chained.init(PARAMS)
    for g in GRADS:
        p, s = step(g, s, p)
    want = _adamw64(PARAMS, GRADS, sched, 0.8, 0.95, 1e-7, 0.05, MASK, clip=1.0)
    _close(p, want, rtol=2e-5, atol=1e-6)
    # and the same as blu's fused adamw after clipping
    opt = optim.adamw(sched, b1=0.8, b2=0.95, eps=1e-7, weight_decay=0.05,
                      mask=optim.decay_mask_matrices)  # fmt: skip
    q, t = PARAMS, opt.init(PARAMS)
    for g in GRADS:
        g, _ = optim.clip_grads_by_global_norm(g, 1.0)
        q, t = opt.step(g, t, q)
    _close(p, q, rtol=1e-5, atol=1e-7)


def test_linear_schedule_negative_begin_is_zero():
    # optax's polynomial_schedule takes transition_begin < 0 as 0 (it shifted the ramp left)
    sched = optim.linear_schedule(1.0, 0.0, 10, transition_begin=-5)
    for c in [0, 3, 10, 12]:
        assert float(sched(c)) == pytest.approx(1.0 - min(c, 10) / 10)


def test_exponential_piecewise_and_joined_schedules():
    # optax's exponential_decay / piecewise_constant_schedule / join_schedules (they were
    # missing: AttributeError), against their closed forms at and around the boundaries
    def exp_ref(c, begin, staircase, end):
        d = c - begin
        p = math.floor(d / 10) if staircase else d / 10
        v = 2.0 if d <= 0 else 2.0 * 0.5**p
        return v if end is None else max(v, end)

    for begin, staircase, end in [(0, False, None), (5, True, 0.3), (-3, False, None)]:
        sched = optim.exponential_decay(2.0, 10, 0.5, begin, staircase, end)
        for c in [0, 4, 5, 9, 14, 15, 25, 60]:
            want = exp_ref(c, max(begin, 0), staircase, end)
            assert float(blu.jit(sched)(np.int32(c))) == pytest.approx(want, rel=1e-6)
    grow = optim.exponential_decay(1.0, 1, 2.0, end_value=5.0)  # rate > 1: end is a ceiling
    assert [float(grow(c)) for c in (1, 2, 3)] == [2.0, 4.0, 5.0]
    assert float(optim.exponential_decay(3.0, 0, 0.5)(7)) == 3.0
    pw = optim.piecewise_constant_schedule(1.0, {10: 0.1, 4: 0.5})
    for c, want in [(0, 1.0), (3, 1.0), (4, 0.5), (9, 0.5), (10, 0.05), (11, 0.05)]:
        assert float(blu.jit(pw)(np.int32(c))) == pytest.approx(want, rel=1e-6)
    assert float(optim.piecewise_constant_schedule(0.3)(100)) == pytest.approx(0.3)
    joined = optim.join_schedules(
        [optim.constant_schedule(1.0), optim.linear_schedule(0.0, 1.0, 10), lambda c: c * 0.0 + 7],
        [5, 20],
    )
    for c, want in [(0, 1.0), (4, 1.0), (5, 0.0), (10, 0.5), (19, 1.0), (20, 7.0), (30, 7.0)]:
        assert float(blu.jit(joined)(np.int32(c))) == pytest.approx(want, rel=1e-6)
    with pytest.raises(blu.errors.BluValueError, match="boundar"):
        optim.join_schedules([optim.constant_schedule(1.0)], [3])
    with pytest.raises(blu.errors.BluValueError, match="scales"):
        optim.piecewise_constant_schedule(1.0, {3: -0.5})


def test_cosine_schedules_exponent():
    # optax's exponent= (it was Python's TypeError): init * ((1 - alpha) * c**exponent + alpha)
    def cos_factor(c, steps):
        return 0.5 * (1 + math.cos(math.pi * min(c, steps) / steps))

    s = optim.cosine_decay_schedule(2.0, 10, alpha=0.1, exponent=3.0)
    for c in [0, 3, 5, 10, 20]:
        want = 2.0 * (0.9 * cos_factor(c, 10) ** 3 + 0.1)
        assert float(blu.jit(s)(np.int32(c))) == pytest.approx(want, rel=1e-6)
    s = optim.warmup_cosine_decay_schedule(0.1, 1.0, 10, 110, end_value=0.01, exponent=2.0)
    for c in [0, 5, 10, 60, 110, 200]:
        want = 0.1 + 0.9 * c / 10 if c < 10 else 0.99 * cos_factor(c - 10, 100) ** 2 + 0.01
        assert float(blu.jit(s)(np.int32(c))) == pytest.approx(want, rel=1e-6)


def test_clip_transform_masked_and_identity():
    g = {"w": np.full((3, 4), 2.0, np.float32), "b": np.zeros(4, np.float32)}
    clip = optim.clip_by_global_norm(3.0)
    out, _ = clip.update(g, clip.init(g))
    norm = math.sqrt(12 * 4.0)
    np.testing.assert_allclose(np.asarray(out["w"]), 2.0 * 3.0 / norm, rtol=1e-6)
    same, n = optim.clip_by_global_norm(g, 3.0)  # the two-argument form
    _close(same, out, rtol=0, atol=0)
    assert float(n) == pytest.approx(norm)
    inner = optim.scale(-2.0)
    m = optim.masked(inner, MASK)
    out, _ = m.update(GRADS[0], m.init(PARAMS), PARAMS)
    np.testing.assert_array_equal(np.asarray(out["w"]), -2.0 * GRADS[0]["w"])
    np.testing.assert_array_equal(np.asarray(out["b"]), GRADS[0]["b"])  # unmasked: unchanged
    ident = optim.identity()
    assert ident.update(GRADS[0], ident.init(PARAMS))[0] is GRADS[0]
    with pytest.raises(blu.errors.BluValueError, match="max_norm"):
        optim.clip_by_global_norm(0.0)
    with pytest.raises(blu.errors.BluValueError, match="params"):
        optim.add_decayed_weights(0.1).update(GRADS[0], None)


def test_optax_schedule_names():
    s = optim.warmup_cosine_decay_schedule(0.1, 1.0, 10, 110, end_value=0.01)
    for c in [0, 5, 10, 60, 110, 200]:
        if c < 10:
            want = 0.1 + 0.9 * c / 10
        else:
            frac = min(c - 10, 100) / 100
            want = 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * frac))
        assert float(s(np.int32(c))) == pytest.approx(want, rel=1e-5)
    lin = optim.linear_schedule(1.0, 0.0, 4, transition_begin=2)
    assert [round(float(lin(np.int32(c))), 6) for c in range(0, 8, 2)] == [1.0, 1.0, 0.5, 0.0]
    for steps in (0, -3):  # optax: no transition, init_value at every count
        flat = optim.linear_schedule(1.0, 0.0, steps, transition_begin=1)
        assert [float(flat(np.int32(c))) for c in (0, 1, 5)] == [1.0, 1.0, 1.0]
    cos = optim.cosine_decay_schedule(2.0, 10, alpha=0.1)
    assert float(cos(np.int32(10))) == pytest.approx(0.2)
    assert float(optim.constant_schedule(0.3)(np.int32(7))) == pytest.approx(0.3)


def test_bf16_updates_are_float32_and_apply_rounds_once():
    p = {"w": bnp.asarray(np.ones(4, np.float32)).astype(bnp.bfloat16)}
    g = {"w": np.full(4, 0.5, np.float32)}
    opt = optim.sgd(1e-3)
    u, _ = opt.update(g, opt.init(p), p)
    assert u["w"].dtype == np.float32
    new = optim.apply_updates(p, u)
    assert new["w"].dtype == bnp.bfloat16
    _close(new, opt.step(g, opt.init(p), p)[0], rtol=0, atol=0)


def test_gpt2_tiny_trains_to_the_same_loss_both_ways():
    """The README's example (examples/gpt2), tiny config, six steps of AdamW with clipping and a
    warmup-cosine schedule: today's loop (clip, then opt.step) and the optax pattern (chain of
    clip_by_global_norm and adamw, update, apply_updates) give the same losses."""
    import dataclasses

    from examples.gpt2.model import CONFIGS, init_params, loss_fn

    cfg = dataclasses.replace(CONFIGS["tiny"], vocab_size=65)  # Shakespeare's characters
    params = init_params(cfg, blu.random.key(0))
    rng = np.random.default_rng(0)
    batch = rng.integers(0, cfg.vocab_size, (4, cfg.n_ctx + 1)).astype(np.int32)
    batches = [batch] * 6  # one batch again and again: the loss must fall
    sched = optim.warmup_cosine_decay(1e-2, 2, 6, end_lr=1e-3)
    adamw = optim.adamw(sched, b1=0.9, b2=0.95, weight_decay=0.1, mask=optim.decay_mask_matrices)
    grad = blu.value_and_grad(lambda p, x, y: loss_fn(p, x, y, cfg))

    @blu.jit
    def old_step(p, s, x, y):
        loss, g = grad(p, x, y)
        g, _ = optim.clip_grads_by_global_norm(g, 1.0)
        p, s = adamw.step(g, s, p)
        return p, s, loss

    opt = optim.chain(optim.clip_by_global_norm(1.0), adamw)

    @blu.jit
    def optax_step(p, s, x, y):
        loss, g = grad(p, x, y)
        updates, s = opt.update(g, s, p)
        return optim.apply_updates(p, updates), s, loss

    def train(step, state):
        p, losses = params, []
        for b in batches:
            p, state, loss = step(p, state, b[:, :-1], b[:, 1:])
            losses.append(float(loss))
        return losses

    old = train(old_step, adamw.init(params))
    new = train(optax_step, opt.init(params))
    np.testing.assert_allclose(new, old, rtol=1e-6)
    assert old[-1] < old[0] - 0.3  # it trains
