"""Pipeline parallelism with the 1F1B schedule, inside ``blu.shard`` over a mesh axis.

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", section 2.2.1 (the non-interleaved 1F1B schedule of PipeDream-Flush): with S
stages and M micro-batches, stage s runs ``min(S - s - 1, M)`` forward passes, then alternates
one forward and one backward, then drains its backward passes; a stage holds at most ``S - s``
micro-batches' inputs at once (instead of M with GPipe), and the bubble is
``(S - 1) / (M + S - 1)`` of the time.

The schedule is a static table (:func:`schedule_1f1b`): at each tick every stage does a forward,
a backward or nothing; after each tick activations move one stage on and cotangents one stage
back (two ``ppermute``). Every device runs the same program (SPMD): its op is chosen from the
table by ``axis_index`` with ``lax.switch`` (on virtual devices the switch becomes a select over
the stacked devices; with one process per device only the chosen branch runs). A backward pass
recomputes its stage's forward from the stashed input (``blu.vjp``), so only stage inputs are
kept between the forward and the backward of a micro-batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes, pytree
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.parallel import axis_index, ppermute, pvary
from blu.transforms import vma
from blu.transforms.ad_api import vjp
from blu.transforms.axes import axis_size

IDLE, FWD, BWD = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A static pipeline schedule: ``kind[t, s]`` (IDLE/FWD/BWD) and ``micro[t, s]`` (the
    micro-batch) of stage s at tick t."""

    kind: np.ndarray
    micro: np.ndarray
    stages: int
    micro_batches: int

    @property
    def ticks(self) -> int:
        return self.kind.shape[0]

    @property
    def bubble_fraction(self) -> float:
        """The fraction of stage-ticks spent idle (a forward and a backward each take a tick)."""
        return float(np.mean(self.kind == IDLE))

    def in_flight(self) -> int:
        """The most micro-batches any stage holds between their forward and backward."""
        most = 0
        for s in range(self.stages):
            live = 0
            for t in range(self.ticks):
                live += int(self.kind[t, s] == FWD) - int(self.kind[t, s] == BWD)
                most = max(most, live)
        return most


def schedule_1f1b(stages: int, micro_batches: int) -> Schedule:
    """The 1F1B schedule of ``stages`` stages and ``micro_batches`` micro-batches.

    A tick's forward result reaches the next stage (and a backward's cotangent the previous
    one) for the next tick. Each stage keeps received activations and cotangents in ``stages``
    slots (micro-batch m in slot ``m % stages``); the table is checked so that no slot is
    overwritten before the backward pass that reads it.

    Raises:
        BluValueError: fewer than one stage or micro-batch.
    """
    S, M = int(stages), int(micro_batches)
    if S < 1 or M < 1:
        raise BluValueError(with_user_line(f"schedule_1f1b: {S} stages, {M} micro-batches"))
    order = []
    for s in range(S):
        w = min(S - s - 1, M)
        ops = [(FWD, m) for m in range(w)]
        for i in range(M - w):
            ops += [(FWD, w + i), (BWD, i)]
        ops += [(BWD, m) for m in range(M - w, M)]
        order.append(ops)
    done: dict[tuple[int, int, int], int] = {}  # (kind, stage, micro) -> tick
    nxt = [0] * S
    kinds, micros = [], []
    t = 0
    while any(nxt[s] < len(order[s]) for s in range(S)):
        row_k, row_m = [IDLE] * S, [0] * S
        for s in range(S):
            if nxt[s] == len(order[s]):
                continue
            k, m = order[s][nxt[s]]
            if k == FWD:
                ready = s == 0 or done.get((FWD, s - 1, m), t) < t
            else:
                ready = done.get((FWD, s, m), t) < t and (
                    s == S - 1 or done.get((BWD, s + 1, m), t) < t
                )
            if ready:
                row_k[s], row_m[s] = k, m
        for s in range(S):
            if row_k[s] != IDLE:
                done[(row_k[s], s, row_m[s])] = t
                nxt[s] += 1
        kinds.append(row_k)
        micros.append(row_m)
        t += 1
        assert t <= 4 * (M + S), "schedule_1f1b: no progress"
    for s in range(S):  # slot m % S must live from its arrival to the backward that reads it
        for m in range(M):
            for m2 in range(m + S, M, S):
                if s > 0:
                    assert done[(FWD, s - 1, m2)] >= done[(BWD, s, m)], (s, m, m2)
                if s < S - 1:
                    assert done[(BWD, s + 1, m2)] >= done[(BWD, s, m)], (s, m, m2)
    return Schedule(np.array(kinds, np.int32), np.array(micros, np.int32), S, M)


def _index(inbox: Any, slot: Any) -> Any:
    return lax.dynamic_index_in_dim(inbox, slot, 0, False, allow_negative_indices=False)


def _pick(table: np.ndarray, t: int, s: Any) -> Any:
    return lax.dynamic_index_in_dim(
        np.ascontiguousarray(table[t], np.int32), s, 0, keepdims=False, allow_negative_indices=False
    )


def _zeros(tree: Any) -> Any:
    return pytree.tree_map(lambda v: lax.full(v.shape, 0, v.dtype), tree)


def _where(pred: Any, a: Any, b: Any) -> Any:
    return pytree.tree_map(lambda x, y: lax.select(lax.broadcast_in_dim(pred, x.shape, ()), x, y),
                           a, b)  # fmt: skip


def pipeline_1f1b(
    stage_fn: Callable,
    params: Any,
    inputs: Any,
    act_shape: tuple[int, ...],
    act_dtype: Any,
    axis: Any,
    micro_batches: int,
) -> tuple[Any, Any]:
    """The loss and this stage's gradients of a pipelined model (inside ``blu.shard``).

    Args:
        stage_fn: ``stage_fn(params, h_in, micro_inputs, stage) -> (h_out, loss)``: one
            stage's work on one micro-batch; ``h_in``/``h_out`` are activations of shape
            ``act_shape`` (stage 0 ignores ``h_in`` and starts from ``micro_inputs``), ``loss``
            a float32 scalar that only the last stage's counts (the others' is ignored),
            ``stage`` this device's index along ``axis`` (an int32 scalar).
        params: this stage's parameters (a pytree; differentiated).
        inputs: a pytree of arrays with a leading axis of ``micro_batches`` (e.g. token ids
            ``(M, B / M, T)``), the same on every stage.
        act_shape, act_dtype: the activations passed between stages.
        axis: the pipeline mesh axis (its size is the number of stages).
        micro_batches: M.

    Returns:
        ``(loss, grads)``: the mean over micro-batches of the last stage's loss (zero on the
        other stages: ``psum`` it over ``axis``), and the gradient of that mean with respect to
        ``params`` on this stage, this device's own (parameters shared by several stages:
        ``psum`` their gradients over ``axis``; average them over a data axis): the parameters
        are ``pvary``-ed over every mesh axis first, so shard_map's gradient rule does not
        all-reduce the gradients of replicated parameters inside the schedule.
    """
    S, M = axis_size(axis, "pipeline_1f1b"), int(micro_batches)
    params = pvary(params, vma.manual_axes())  # per-device gradients (see Returns)
    sched = schedule_1f1b(S, M)
    s = axis_index(axis)
    last = lax.eq(s, lax.full((), S - 1, dtypes.int32))
    act = lambda *lead: lax.full(tuple(lead) + tuple(act_shape), 0, act_dtype)  # noqa: E731
    f32 = lambda v: lax.full((), v, dtypes.float32)  # noqa: E731
    ct_loss = lax.select(last, f32(1.0 / M), f32(0.0))
    # arrivals: what stage s receives after tick t, and into which slot
    arr_f = np.zeros_like(sched.kind)
    arr_b = np.zeros_like(sched.kind)
    slot_f = np.zeros_like(sched.kind)
    slot_b = np.zeros_like(sched.kind)
    for t in range(sched.ticks):
        for j in range(S):
            if j > 0 and sched.kind[t, j - 1] == FWD:
                arr_f[t, j], slot_f[t, j] = 1, sched.micro[t, j - 1] % S
            if j < S - 1 and sched.kind[t, j + 1] == BWD:
                arr_b[t, j], slot_b[t, j] = 1, sched.micro[t, j + 1] % S

    def micro(i):
        return pytree.tree_map(lambda v: _index(v, i), inputs)

    def fwd(state, i):
        grads, loss, inbox_f, inbox_b = state
        slot = lax.rem(i, lax.full((), S, dtypes.int32))
        h_in = _index(inbox_f, slot)
        h, l_ = stage_fn(params, h_in, micro(i), s)
        loss = loss + lax.select(last, lax.convert_element_type(l_, dtypes.float32), f32(0.0))
        return (grads, loss, inbox_f, inbox_b), h, act()

    def bwd(state, i):
        grads, loss, inbox_f, inbox_b = state
        slot = lax.rem(i, lax.full((), S, dtypes.int32))
        h_in = _index(inbox_f, slot)
        ct_h = _index(inbox_b, slot)
        x = micro(i)
        (h, l_), back = vjp(lambda p, hi: stage_fn(p, hi, x, s), params, h_in)
        g_p, g_h = back((ct_h, lax.convert_element_type(ct_loss, get_aval(l_).dtype)))
        grads = pytree.tree_map(lax.add, grads, g_p)
        return (grads, loss, inbox_f, inbox_b), act(), g_h

    def idle(state, i):
        return state, act(), act()

    state = (_zeros(params), f32(0.0), act(S), act(S))
    fwd_perm = [(j, j + 1) for j in range(S - 1)]
    bwd_perm = [(j + 1, j) for j in range(S - 1)]
    for t in range(sched.ticks):
        kind, i = _pick(sched.kind, t, s), _pick(sched.micro, t, s)
        if S == 1:  # no switch needed: the table is static
            k = int(sched.kind[t, 0])
            state, _, _ = (idle, fwd, bwd)[k](state, i)
            continue
        state, send_f, send_b = lax.switch(kind, [idle, fwd, bwd], state, i)
        got_f = ppermute(send_f, axis, fwd_perm)
        got_b = ppermute(send_b, axis, bwd_perm)
        grads, loss, inbox_f, inbox_b = state
        if arr_f[t].any():
            upd = lax.dynamic_update_index_in_dim(
                inbox_f, got_f, _pick(slot_f, t, s), 0, allow_negative_indices=False
            )
            inbox_f = _where(lax.ne(_pick(arr_f, t, s), lax.full((), 0, dtypes.int32)), upd,
                             inbox_f)  # fmt: skip
        if arr_b[t].any():
            upd = lax.dynamic_update_index_in_dim(
                inbox_b, got_b, _pick(slot_b, t, s), 0, allow_negative_indices=False
            )
            inbox_b = _where(lax.ne(_pick(arr_b, t, s), lax.full((), 0, dtypes.int32)), upd,
                             inbox_b)  # fmt: skip
        state = (grads, loss, inbox_f, inbox_b)
    grads, loss = state[0], state[1]
    return lax.div(loss, f32(float(M))), grads
