"""lax.ragged_all_to_all on virtual CPU devices, against a numpy loop that simulates every device
(JAX's description: slice i of a sender goes to member i // k, landing at the sender's
output_offsets[i] in the receiver's output; rows not written keep output's values). Derivatives
against finite differences and against the numpy routing of the cotangent back; vmap, jit,
vmap(axis_name=...), axis_index_groups, dtypes, the argument errors, and two CPU processes
(the collectives through the process group's communicator)."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.parallel import P, shard
from tests.helpers import check_grads, check_jit, check_vmap, first_devices_mesh


@pytest.fixture(autouse=True)
def _eight_devices(set_flag):
    set_flag("num_cpu_devices", 8)


def _members(shape, axes, names):
    """device (flat mesh order) -> (flat indices of its group in group order, its position)."""
    coords = list(itertools.product(*[range(s) for s in shape]))
    flat = {c: i for i, c in enumerate(coords)}
    out = []
    for c in coords:
        cd = dict(zip(axes, c))
        mem = [m for m in coords
               if all(dict(zip(axes, m))[a] == cd[a] for a in axes if a not in names)]  # fmt: skip

        def lin(m):
            md, i = dict(zip(axes, m)), 0
            for n in names:
                i = i * shape[axes.index(n)] + md[n]
            return i

        mem.sort(key=lin)
        out.append(([flat[m] for m in mem], mem.index(c)))
    return out


def reference(groups, operand, output, io, ss, oo, rs):
    """Every device's result: for each group, each sender s (group order) sends its slice i to
    member i // k, written at oo[s][i] there (recv order: sender major, then slice)."""
    res = np.array(output, copy=True)
    for members in groups:
        n = len(members)
        k = io.shape[1] // n
        for pos_s, s in enumerate(members):
            for i in range(io.shape[1]):
                d = members[i // k]
                assert rs[d][pos_s * k + i % k] == ss[s][i]  # the inputs are consistent
                rows = operand[s][io[s][i] : io[s][i] + ss[s][i]]
                res[d][oo[s][i] : oo[s][i] + len(rows)] = rows
    return res


def _case(rng, n_dev, groups, k, rest, disjoint=True):
    """Random consistent index arrays (zero sizes included) and the operand/output row counts."""
    n = len(groups[0])
    big_k = n * k
    ss = rng.integers(0, 4, (n_dev, big_k)) * (rng.random((n_dev, big_k)) < 0.8)
    if rng.random() < 0.1:
        ss[:] = 0
    r_in = int(ss.max(initial=0)) + int(rng.integers(0, 3))
    io = np.stack([rng.integers(0, r_in - s + 1) for s in ss]) if r_in else np.zeros_like(ss)
    rs = np.zeros_like(ss)
    oo = np.zeros_like(ss)
    ends = []
    for members in groups:
        for pos_d, d in enumerate(members):
            incoming = [(s, pos_d * k + c) for s in members for c in range(k)]
            for pos_s, (s, i) in enumerate(incoming):
                rs[d][pos_s] = ss[s][i]
            at = top = 0
            for s, i in rng.permutation(incoming) if disjoint else incoming:
                gap = int(rng.integers(0, 3)) if disjoint else -int(rng.integers(0, at + 1))
                at = max(at + gap, 0)
                oo[s][i] = at
                at += ss[s][i]
                top = max(top, at)
            ends.append(top)
    m_out = max(ends) + int(rng.integers(0, 3))
    operand = rng.standard_normal((n_dev, r_in, *rest))
    output = rng.standard_normal((n_dev, m_out, *rest))
    return operand, output, *(a.astype(np.int32) for a in (io, ss, oo, rs))


def _sharded(fn, mesh):
    allax = tuple(mesh.axis_names)
    return shard(lambda *a: fn(*[x[0] for x in a])[None], mesh, P(allax), P(allax))


SETUPS = [((1,), ("a",)), ((2,), ("a",)), ((4,), ("a",)), ((2, 2), ("a", "b")),
          ((2, 2), ("b", "a")), ((2, 2), ("b",)), ((2, 4), ("a",))]  # fmt: skip


@given(st.sampled_from(SETUPS), st.integers(1, 2), st.integers(0, 2), st.booleans(),
       st.integers(0, 2**32 - 1))  # fmt: skip
def test_values_against_a_loop_over_devices(setup, k, rank, disjoint, seed):
    shape, names = setup
    axes = ("a", "b")[: len(shape)]
    mesh = first_devices_mesh(shape, axes)
    rng = np.random.default_rng(seed)
    groups = [m for m, pos in _members(shape, axes, names) if pos == 0]
    args = _case(rng, mesh.size, groups, k, (2, 3)[:rank], disjoint)
    name = names[0] if len(names) == 1 else names
    got = _sharded(lambda *a: lax.ragged_all_to_all(*a, axis_name=name), mesh)(*args)
    np.testing.assert_array_equal(np.asarray(got), reference(groups, *args))


@given(st.integers(1, 2), st.integers(0, 2**32 - 1))
def test_axis_index_groups(k, seed):
    mesh = first_devices_mesh((4,), ("a",))
    groups = [[0, 3], [2, 1]]
    args = _case(np.random.default_rng(seed), 4, groups, k, (2,))
    f = _sharded(lambda *a: lax.ragged_all_to_all(*a, axis_name="a", axis_index_groups=groups),
                 mesh)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(f(*args)), reference(groups, *args))


def test_jax_docstring_example():
    mesh = first_devices_mesh((2,), ("i",))
    operand = np.array([[1, 2, 2], [3, 4, 0]], np.float32)
    output = np.zeros((2, 4), np.float32)
    idx = [np.array(v, np.int32) for v in ([[0, 1], [0, 1]], [[1, 2], [1, 1]],
                                           [[0, 0], [1, 2]], [[1, 1], [2, 1]])]  # fmt: skip
    f = _sharded(lambda *a: lax.ragged_all_to_all(*a, axis_name="i"), mesh)
    got = np.asarray(f(operand, output, *idx))
    np.testing.assert_array_equal(got, [[1, 3, 0, 0], [2, 2, 4, 0]])
    assert got.dtype == np.float32


def _fixed(seed=3, shape=(4,), k=2):
    rng = np.random.default_rng(seed)
    n_dev = math.prod(shape)
    return _case(rng, n_dev, [list(range(n_dev))], k, (2,))


def test_grad_against_finite_differences_and_the_routing_back():
    mesh = first_devices_mesh((4,), ("a",))
    operand, output, *idx = _fixed()
    assert idx[1].sum() > 0 and (output.shape[1] > idx[3].sum(1)).any()  # both paths used

    def f(op, out):
        return _sharded(lambda a, b, *i: lax.ragged_all_to_all(a, b, *i, axis_name="a"),
                        mesh)(op, out, *idx)  # fmt: skip

    check_grads(f, [operand, output], order=2)
    # d<w, result>: w routed back along the slices to the operand (JAX's transpose, a
    # ragged_all_to_all back), and w on the rows no slice wrote to the output
    w = np.random.default_rng(7).standard_normal(output.shape)
    g_op, g_out = blu.grad(lambda a, b: (f(a, b) * w).sum(), argnums=(0, 1))(operand, output)
    io, ss, oo, rs = idx
    want_op = np.zeros_like(operand)
    want_out = w.copy()
    n, k = 4, io.shape[1] // 4
    for s in range(n):
        for i in range(io.shape[1]):
            d = i // k
            want_op[s][io[s][i] : io[s][i] + ss[s][i]] += w[d][oo[s][i] : oo[s][i] + ss[s][i]]
            want_out[d][oo[s][i] : oo[s][i] + ss[s][i]] = 0
    np.testing.assert_allclose(np.asarray(g_op), want_op, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(g_out), want_out, rtol=1e-12, atol=1e-12)


def test_vmap_jit_and_a_vmap_named_axis():
    mesh = first_devices_mesh((2, 2), ("a", "b"))
    operand, output, *idx = _fixed(5, (2, 2), 1)

    def f(op, out, io):
        return _sharded(lambda a, b, i, *r: lax.ragged_all_to_all(a, b, i, *r,
                                                                  axis_name=("a", "b")),
                        mesh)(op, out, io, *idx[1:])  # fmt: skip

    check_jit(f, [operand, output, idx[0]], atol=0, rtol=0)
    rng = np.random.default_rng(1)
    ops = rng.standard_normal((3, *operand.shape))
    check_vmap(f, [ops, output, idx[0]], [0, None, None], atol=1e-12)
    r_in = operand.shape[1]
    ios = np.stack([np.minimum(idx[0] + j, r_in - idx[1]) for j in range(3)]).astype(np.int32)
    check_vmap(f, [operand, rng.standard_normal((*output.shape[:2], 3, 2)), ios], [None, 2, 0],
               atol=1e-12)  # fmt: skip
    # no mesh: vmap with an axis name binds it (pmap's semantics)
    g = blu.vmap(lambda *a: lax.ragged_all_to_all(*a, axis_name="i"), axis_name="i")
    want = reference([[0, 1, 2, 3]], operand, output, *idx)
    np.testing.assert_array_equal(np.asarray(g(operand, output, *idx)), want)


@pytest.mark.parametrize("dt", [np.int32, np.uint8, ml_dtypes.bfloat16, np.float16, np.bool_])
def test_dtypes(dt):
    mesh = first_devices_mesh((2,), ("a",))
    operand, output, *idx = _fixed(11, (2,), 2)
    operand, output = (np.asarray(v > 0 if dt == np.bool_ else 10 * v).astype(dt)
                       for v in (operand, output))  # fmt: skip
    idx = [i.astype(t) for i, t in zip(idx, (np.int64, np.int32, np.uint32, np.int8))]
    got = _sharded(lambda *a: lax.ragged_all_to_all(*a, axis_name="a"), mesh)(operand, output,
                                                                               *idx)  # fmt: skip
    got = np.asarray(got)
    assert got.dtype == np.dtype(dt)
    np.testing.assert_array_equal(got, reference([[0, 1]], operand, output, *idx))


def test_errors():
    mesh = first_devices_mesh((2,), ("a",))
    operand, output, *idx = _fixed(2, (2,), 1)

    def run(*args, **kw):
        kw.setdefault("axis_name", "a")
        return _sharded(lambda *a: lax.ragged_all_to_all(*a, **kw), mesh)(*args)

    with pytest.raises(BluValueError, match="unbound axis name 'a'"):
        lax.ragged_all_to_all(operand[0], output[0], *(i[0] for i in idx), axis_name="a")
    with pytest.raises(BluValueError, match="unbound axis name 'z'"):
        run(operand, output, *idx, axis_name="z")
    with pytest.raises(BluTypeError, match=r"send_sizes must be integers, got f32\[2\]"):
        run(operand, output, idx[0], idx[1].astype(np.float32), *idx[2:])
    with pytest.raises(BluShapeError, match=r"recv_sizes must be 1-D, got i32\[2,1\]"):
        run(operand, output, *idx[:3], idx[3][:, :, None])
    with pytest.raises(BluShapeError, match="input_offsets of length 4, send_sizes of length 2"):
        run(operand, output, np.tile(idx[0], 2), *idx[1:])
    with pytest.raises(BluShapeError, match="positive multiple of the 2 devices"):
        run(operand, output, *(i[:, :1] for i in idx))
    with pytest.raises(BluShapeError, match=r"operand f64\[\d+,3\] and output f64\[\d+,2\]"):
        run(np.concatenate([operand, operand[..., :1]], -1), output, *idx)
    with pytest.raises(BluTypeError, match="must have one dtype"):
        run(operand.astype(np.float32), output, *idx)
    with pytest.raises(BluShapeError, match="rank >= 1"):
        run(operand[:, 0, 0], output, *idx)
    with pytest.raises(BluValueError, match="exactly once"):
        run(operand, output, *idx, axis_index_groups=[[0, 1], [1]])
    mesh = first_devices_mesh((4,), ("a",))
    operand, output, *idx = _fixed(2, (4,), 1)
    with pytest.raises(BluValueError, match="same size"):
        run(operand, output, *idx, axis_index_groups=[[0, 1, 2], [3]])
    with pytest.raises(BluShapeError, match="positive multiple of the 2 devices"):
        run(operand, output, *(i[:, :3] for i in idx), axis_index_groups=[[0, 1], [2, 3]])


# ---- one process per device ---------------------------------------------------------------------

WORKER = """
import numpy as np
import blu
from blu import lax, parallel as bp
from blu.parallel import P, NamedSharding

bp.initialize()
r, n = bp.process_index(), bp.process_count()
assert n == 2
mesh = bp.make_mesh((n,), ("x",))
rng = np.random.default_rng(0)
operand, output, w = (rng.standard_normal(s) for s in ((n, 3, 2), (n, 4, 2), (n, 4, 2)))
io, ss, oo, rs = (np.array(v, np.int32) for v in ([[0, 1], [1, 0]], [[1, 2], [2, 1]],
                                                   [[0, 2], [1, 0]], [[1, 2], [2, 1]]))
want, want_g = output.copy(), np.zeros_like(operand)
for s in range(n):
    for d in range(n):
        want[d][oo[s][d] : oo[s][d] + ss[s][d]] = operand[s][io[s][d] : io[s][d] + ss[s][d]]
        want_g[s][io[s][d] : io[s][d] + ss[s][d]] += w[d][oo[s][d] : oo[s][d] + ss[s][d]]


def body(a, b, *idx):
    return lax.ragged_all_to_all(a[0], b[0], *(i[0] for i in idx), axis_name="x")[None]


def grad_body(a, b, wb, *idx):
    return blu.grad(lambda v: (body(v, b, *idx) * wb).sum())(a)


put = [bp.device_put(v, NamedSharding(mesh, P("x"))) for v in (operand, output, w, io, ss, oo, rs)]
for fn in (bp.shard(body, mesh, P("x"), P("x")), blu.jit(bp.shard(body, mesh, P("x"), P("x")))):
    got = np.asarray(fn(put[0], put[1], *put[3:]).addressable_shards[0].data)
    assert np.array_equal(got[0], want[r]), (got, want[r])
g = bp.shard(grad_body, mesh, P("x"), P("x"))(*put)
assert np.allclose(np.asarray(g.addressable_shards[0].data)[0], want_g[r], rtol=1e-12, atol=1e-12)
print(f"RANK {r} OK", flush=True)
"""


def test_between_two_cpu_processes(tmp_path):
    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))
    }
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BLU_NUM_CPU_DEVICES", None)
    env["BLU_PARALLEL_BACKEND"] = "cpu"
    cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", "2", str(script), "cpu"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "RANK 0 OK" in res.stdout and "RANK 1 OK" in res.stdout
