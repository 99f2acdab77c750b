"""The collectives on CUDA targets as library nodes (``blu/lower/cuda/collectives.py``), marked
``gpu``:

- a jitted program with every collective, under a process mesh of one member, plans library
  nodes (no host fallback) and equals numpy; on a GPU with nccl4py the member is a real NCCL
  world of one (the calls on the executable's stream), else a ``SelfCommunicator`` (device
  copies); on the simulated GPU (``BLU_FAKE_GPU=1``) the lowering's CPU form runs;
- each NCCL call of the device form, on the simulated device, with a stand-in communicator of
  two members that computes what NCCL would from the other member's operand: the addresses,
  counts and dtypes it is given, against numpy float64 of the global computation.
"""

from __future__ import annotations

import contextlib
import ctypes

import ml_dtypes
import numpy as np
import pytest
from gpu_helpers import FAKE, GPU_MARKS, check, make_device, plan_nodes, put

import blu
from blu import parallel as bp
from blu.core.aval import ShapedArray
from blu.cuda.fake import FakeDevice, _host_view
from blu.lax import parallel as lp
from blu.lower.cuda import collectives as cc
from blu.lower.plan.nodes import NodeKind
from blu.parallel.comm import SelfCommunicator
from blu.transforms.axes import ProcessAxisEnv, process_axis_env

pytestmark = GPU_MARKS


@contextlib.contextmanager
def process_mesh(comm):
    """A 1-D process mesh ``'x'`` whose group is ``comm`` (as ``blu.shard`` enters one)."""
    env = ProcessAxisEnv({"x": comm.size}, {"x": comm.rank}, lambda names: comm)
    with process_axis_env(env):
        yield


def _world_of_one(dev):
    if not FAKE:
        from blu.parallel import nccl

        if nccl.available():
            return nccl.NcclCommunicator.init(1, 0, nccl.new_unique_id(), dev.id)
    return SelfCommunicator()


def _program(b):
    return (
        bp.psum(b, "x"),
        bp.pmax(b, "x"),
        bp.pmin(b, "x"),
        bp.all_gather(b, "x", axis=1, tiled=True),
        bp.psum_scatter(b, "x", scatter_dimension=0, tiled=True),
        bp.all_to_all(b, "x", 0, 1, tiled=True),
        bp.ppermute(b, "x", [(0, 0)]),
        bp.axis_index("x"),
    )


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.int32])
def test_a_world_of_one_runs_library_nodes(dt):
    dev = make_device()
    x = (np.arange(24).reshape(4, 6) % 7 - 3).astype(dt)
    with process_mesh(_world_of_one(dev)):
        kinds = [n.kind for n in plan_nodes(_program, x)]
        assert NodeKind.FALLBACK not in kinds and kinds.count(NodeKind.LIBRARY) == 8, kinds
        outs = blu.jit(_program)(put(dev, x))
    want = [x, x, x, x, x, x, x, np.int32(0)]  # one member: every collective is the identity
    for got, w in zip(outs, want, strict=True):
        check(got, np.asarray(w, np.float64), dtype=np.asarray(w).dtype)


def test_reductions_nccl_has_no_type_for_stay_host_fallbacks():
    with process_mesh(SelfCommunicator()):
        kinds = [n.kind for n in plan_nodes(lambda b: bp.psum(b, "x"), np.ones(3, np.int16))]
    assert kinds == [NodeKind.FALLBACK], kinds


# ---- the device form's NCCL calls, with a stand-in for a group of two --------------------------


class TwoMembers:
    """Member ``rank`` of two, with NCCL's pointer methods on host memory: the other member's
    operand is ``other`` (it runs the same program), so each call computes what NCCL would."""

    size = 2

    def __init__(self, rank: int, other: np.ndarray):
        self.rank, self.other = rank, np.ascontiguousarray(other)
        self.streams: list[int] = []

    def _parts(self, send: int, count: int, dtype) -> list[np.ndarray]:
        dt = np.dtype(dtype)
        mine = _host_view(send, count, dt).astype(np.float64)
        theirs = self.other.reshape(-1).view(dt)[:count].astype(np.float64)
        return [mine, theirs] if self.rank == 0 else [theirs, mine]

    def all_reduce_ptr(self, send, recv, count, dtype, op, stream):
        self.streams.append(stream)
        red = {"sum": np.sum, "max": np.max, "min": np.min}[op](self._parts(send, count, dtype), 0)
        _host_view(recv, count, np.dtype(dtype))[...] = red

    def all_gather_ptr(self, send, recv, count, dtype, stream):
        self.streams.append(stream)
        parts = [p.astype(np.uint8) for p in self._parts(send, count, np.uint8)]
        _host_view(recv, 2 * count, np.dtype(np.uint8))[...] = np.concatenate(parts)

    def reduce_scatter_ptr(self, send, recv, count, dtype, stream):
        self.streams.append(stream)
        total = np.sum(self._parts(send, 2 * count, dtype), 0)
        _host_view(recv, count, np.dtype(dtype))[...] = total[self.rank * count :][:count]

    def send_recv_ptr(self, sends, recvs, stream):
        """Sends go nowhere; a receive from the other member gets the bytes of its operand it
        sends here: chunk ``rank`` (all_to_all) or all of them (ppermute)."""
        self.streams.append(stream)
        raw = self.other.reshape(-1).view(np.uint8)
        for ptr, nbytes, peer in recvs:
            if peer == self.rank:  # to itself: the matching send's bytes
                (src,) = [s for s, n, p in sends if p == self.rank]
                ctypes.memmove(ptr, src, nbytes)
            elif nbytes == raw.size:
                ctypes.memmove(ptr, raw.ctypes.data, nbytes)
            else:
                ctypes.memmove(ptr, raw.ctypes.data + self.rank * nbytes, nbytes)


def _run_device_form(prim, params, x, out_shape, comm):
    dev = FakeDevice()
    out = np.full(out_shape, 99, x.dtype)
    fn = cc._gpu(prim)
    with process_mesh(comm):
        avals = [ShapedArray(x.shape, x.dtype)], [ShapedArray(out.shape, out.dtype)]
        fn(dev, dev.stream_id, [x.ctypes.data], [out.ctypes.data], 0, *avals, **params)
    assert comm.streams and set(comm.streams) == {dev.stream_id}  # the executable's stream
    return out


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.complex64, np.int64])
def test_each_nccl_call_of_the_device_form(rank, dt):
    rng = np.random.default_rng(rank)
    g = (rng.standard_normal((2, 2, 3)) * 4).round()  # member j holds g[j]
    if np.dtype(dt).kind == "c":
        g = g + 1j * g[::-1]
    g = g.astype(dt)
    x, other = g[rank], g[1 - rank]
    ref = g.astype(np.complex128 if np.dtype(dt).kind == "c" else np.float64)
    cases = [
        (lp.psum_p, {"axis_name": ("x",)}, x.shape, ref.sum(0)),
        (lp.all_gather_p, {"axis_name": ("x",), "axis_sizes": (2,)}, (2, 2, 3), ref),
        (lp.reduce_scatter_p, {"axis_name": ("x",), "axis_sizes": (2,)}, (3,), ref.sum(0)[rank]),
        (lp.all_to_all_p, {"axis_name": "x", "axis_size": 2}, x.shape, ref[:, rank]),
        (lp.ppermute_p, {"axis_name": "x", "perm": ((0, 1), (1, 0))}, x.shape, ref[1 - rank]),
        (lp.ppermute_p, {"axis_name": "x", "perm": ((1, 0),)}, x.shape,
         ref[1] if rank == 0 else 0 * ref[0]),
    ]  # fmt: skip
    if np.dtype(dt).kind != "c":
        cases += [
            (lp.pmax_p, {"axis_name": ("x",)}, x.shape, ref.max(0)),
            (lp.pmin_p, {"axis_name": ("x",)}, x.shape, ref.min(0)),
        ]
    for prim, params, shape, want in cases:
        got = _run_device_form(prim, params, x, shape, TwoMembers(rank, other))
        tol = 1e-2 if dt == ml_dtypes.bfloat16 else 1e-6
        np.testing.assert_allclose(got.astype(want.dtype), want, rtol=tol, err_msg=prim.name)


def test_axis_index_and_a_group_of_one_without_nccl():
    dev = FakeDevice()
    out = np.full((), 7, np.int32)
    env = ProcessAxisEnv({"x": 4}, {"x": 3}, lambda names: SelfCommunicator())
    with process_axis_env(env):
        cc._gpu(lp.axis_index_p)(dev, dev.stream_id, [], [out.ctypes.data], 0, [],
                                 [ShapedArray((), np.int32)], axis_name="x")  # fmt: skip
    assert out == 3
    x = np.arange(6.0, dtype=np.float32)
    aval = ShapedArray((6,), np.float32)
    for perm, want in ((((0, 0),), x), ((), 0 * x)):
        got = np.full(6, 99, np.float32)
        with process_mesh(SelfCommunicator()):
            ptrs = [x.ctypes.data], [got.ctypes.data]
            cc._gpu(lp.ppermute_p)(dev, dev.stream_id, *ptrs, 0, [aval], [aval],
                                   axis_name="x", perm=perm)  # fmt: skip
        np.testing.assert_array_equal(got, want)
