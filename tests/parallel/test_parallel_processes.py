"""One process per device: the launcher, the TCP store, collectives between CPU processes, and
(on a GPU machine) the world-of-one NCCL path.

Each test starts real processes through ``python -m blu.parallel.launch`` (or alone); the worker
checks every collective's block against numpy on the global array and prints ``OK``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from blu.parallel import nccl
from blu.parallel.launch import child_env
from blu.parallel.store import LocalStore, StoreServer, TCPStore

ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import ml_dtypes
    import blu
    from blu import parallel as bp
    from blu.parallel import P, NamedSharding

    bp.initialize()
    r, n = bp.process_index(), bp.process_count()
    mesh = bp.make_mesh((n,), ("x",))
    assert [d.process_index for d in bp.devices()] == list(range(n))

    def local(o):  # shard's outputs are ShardedArrays; jit's are this process's blocks
        return np.asarray(o.addressable_shards[0].data if hasattr(o, "addressable_shards") else o)

    def block(g):  # this process's rows of a global array split over 'x'
        k = g.shape[0] // n
        return g[r * k:(r + 1) * k]

    for dt in (np.float32, np.float64, ml_dtypes.bfloat16, np.int32):
        g = (np.arange(4 * n * 3) % 7).reshape(4 * n, 3).astype(dt)
        xs = bp.device_put(g, NamedSharding(mesh, P("x")))
        assert xs.shape == g.shape and xs.addressable_shards[0].device.process_index == r
        glob = xs.global_shards  # every process's block; data only for this process's
        assert [s.device.process_index for s in glob] == list(range(n))
        assert [s.data is None for s in glob] == [i != r for i in range(n)]
        np.testing.assert_array_equal(np.asarray(glob[r].data), block(g))
        assert xs.sharding.addressable_devices == {glob[r].device}
        assert xs.sharding.is_fully_addressable == (n == 1) and xs.sharding.num_devices == n
        blocks = g.reshape(n, 4, 3)
        perm = [(i, (i + 1) % n) for i in range(n)]

        def f(b):
            return (
                bp.psum(b, "x"),
                bp.pmax(b, "x"),
                bp.all_gather(b, "x", tiled=True),
                bp.psum_scatter(b, "x", tiled=True),
                bp.ppermute(b, "x", perm),
                bp.all_to_all(b, "x", 0, 0, tiled=True),
                bp.axis_index("x")[None],
            )

        specs = (P(), P(), P(), P("x"), P("x"), P("x"), P("x"))
        want = [
            blocks.sum(0).astype(dt),
            blocks.max(0),
            g,
            block(blocks.sum(0).astype(dt)) if 4 % n == 0 else None,
            blocks[(r - 1) % n],
            np.concatenate([blocks[j][r * (4 // n):(r + 1) * (4 // n)] for j in range(n)])
            if 4 % n == 0 else None,
            np.array([r]),
        ]
        for how, fn in (("eager", bp.shard(f, mesh, P("x"), specs)),
                        ("jit", blu.jit(bp.shard(f, mesh, P("x"), specs)))):
            outs = fn(xs)
            for i, (o, w) in enumerate(zip(outs, want)):
                if w is None:
                    continue
                got = local(o)
                tol = 1e-2 if dt == ml_dtypes.bfloat16 else 1e-6
                assert got.shape == w.shape, (how, dt, i, got.shape, w.shape)
                ok = np.allclose(got.astype(np.float64), w.astype(np.float64), rtol=tol)
                assert ok, (how, dt, i)

    flags = (np.arange(2 * n) % 3 == 0).reshape(2 * n, 1)
    gathered = bp.shard(lambda b: bp.all_gather(b, "x", tiled=True), mesh, P("x"), P())(
        bp.device_put(flags, NamedSharding(mesh, P("x"))))
    assert np.array_equal(local(gathered), flags)

    # data-parallel gradient inside shard (shard_map's rule): the gradient of the pmean-ed loss
    # w.r.t. the replicated w is the global one, eagerly and inside one jitted program; the
    # gradient of the local loss is the sum of the devices' gradients
    w0 = np.linspace(-1, 1, 3).astype(np.float32)
    xb = np.linspace(0, 1, 8 * n * 3).reshape(8 * n, 3).astype(np.float32)

    def step(w, x):
        return blu.grad(lambda w: bp.pmean(((x @ w) ** 2).mean(), "x"))(w)

    def local_step(w, x):
        return blu.grad(lambda w: ((x @ w) ** 2).mean())(w)

    ref = (2 * xb * (xb @ w0)[:, None]).mean(0)
    for fn in (bp.shard(step, mesh, (P(), P("x")), P()),
               blu.jit(bp.shard(step, mesh, (P(), P("x")), P()))):
        assert np.allclose(local(fn(w0, xb)), ref, rtol=1e-5, atol=1e-6)
    g = bp.shard(local_step, mesh, (P(), P("x")), P())(w0, xb)
    assert np.allclose(local(g), n * ref, rtol=1e-5, atol=1e-6)
    g = bp.shard(blu.jit(step), mesh, (P(), P("x")), P())(w0, xb)  # a jit inside the body
    assert np.allclose(local(g), ref, rtol=1e-5, atol=1e-6)
    inv = blu.jit(lambda w: blu.grad(lambda v: (bp.psum(v, "x") ** 2).sum())(w))
    g = bp.shard(inv, mesh, P(), P())(w0)  # psum of an invariant value: n * v
    assert np.allclose(local(g), 2 * n * n * w0, rtol=1e-5, atol=1e-6)
    if sys.argv[1:] == ["cpu"]:  # (kept off the GPU machines: their kernel cache)
        # a cond on a predicate that varies over x, psums in both branches: each process gives
        # its own branch's operand; only one's depends on w, and the other's devices see w's
        # effect through the pair's result (the transposed branches' psums did not pair up:
        # a scalar met a block); a psum in one branch only is an error on every process
        xg = np.array([(-1) ** k * v for k in range(n) for v in (0.5 + 0.1 * k, 0.3)])
        hot = lambda q: q.sum() > 0  # noqa: E731

        def cond_loss(w, x):
            return bp.psum(blu.numpy.sum(blu.lax.cond(
                hot(x), lambda v: bp.psum(v * w, "x"), lambda v: bp.psum(v, "x") * w, x)), "x")

        def cond_np(w):
            s = sum(q * w if hot(q) else q for q in xg.reshape(n, 2))
            return sum((s if hot(q) else s * w).sum() for q in xg.reshape(n, 2))

        xgs = bp.device_put(xg, NamedSharding(mesh, P("x")))
        g = bp.shard(blu.grad(cond_loss), mesh, (P(), P("x")), P())(np.array(0.7), xgs)
        assert np.allclose(local(g), (cond_np(0.7 + 1e-6) - cond_np(0.7 - 1e-6)) / 2e-6)
        try:
            bp.shard(lambda x: blu.lax.cond(hot(x), lambda v: bp.psum(v, "x"), lambda v: v, x),
                     mesh, P("x"), P("x"))(xgs)
            raise AssertionError("a psum in one branch of a varying cond did not raise")
        except blu.errors.BluValueError as e:
            assert "psum over axis 'x'" in str(e), str(e)
        # a while_loop whose predicate varies over x (3 iterations here, 4 there) with a psum in
        # its body: an error on every process (the second process's fourth psum had no partner)
        try:
            bp.shard(lambda x: blu.lax.while_loop(
                lambda c: c[0] < 3.0, lambda c: (c[0] + 1.0, c[1] + bp.psum(c[0], "x")),
                (x.sum(), 0.0 * x[0]))[1][None], mesh, P("x"), P("x"))(xgs)
            raise AssertionError("a psum in a while_loop on a varying predicate did not raise")
        except blu.errors.BluValueError as e:
            assert "while_loop: cond_fun's result varies" in str(e), str(e)
            assert "psum over axis 'x'" in str(e), str(e)
    # device_put to a named device: this process's own is fine; another process's raises
    assert bp.device_put(np.ones(2), bp.local_devices()[0]).devices() == {bp.local_devices()[0]}
    if n > 1:
        other = bp.devices()[(r + 1) % n]
        try:
            bp.device_put(np.ones(2), other)
            raise AssertionError("device_put to another process's device did not raise")
        except blu.errors.BluValueError as e:
            assert repr(other) in str(e) and "belongs to process" in str(e), str(e)
    print(f"RANK {r} OK backend={sys.argv[1] if len(sys.argv) > 1 else ''}", flush=True)
    """
)


def _env(**extra: str) -> dict:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))
    }
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BLU_NUM_CPU_DEVICES", None)
    env.update(extra)
    return env


def _launch(tmp_path: Path, nproc: int, backend: str, launcher: bool = True) -> str:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = _env(BLU_PARALLEL_BACKEND=backend)
    if launcher:
        cmd = [
            sys.executable,
            "-m",
            "blu.parallel.launch",
            "--nproc",
            str(nproc),
            str(script),
            backend,
        ]
    else:
        cmd = [sys.executable, str(script), backend]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


# ---- the store ----------------------------------------------------------------------------------


def test_store_set_get_add_across_threads():
    server = StoreServer()
    try:
        a, b = TCPStore(server.host, server.port, 10), TCPStore(server.host, server.port, 10)
        a.set("k", b"value")
        assert b.get("k") == b"value"
        assert a.add("n", 2) == 2 and b.add("n", 3) == 5
        assert b.check("k") and not b.check("missing")
        b.delete("k")
        assert not a.check("k")
        a.close(), b.close()
    finally:
        server.close()


def test_store_get_times_out():
    from blu.parallel.store import StoreError

    server = StoreServer()
    try:
        with pytest.raises(StoreError, match="timed out"):
            TCPStore(server.host, server.port, 0.2).get("never")
    finally:
        server.close()
    with pytest.raises(StoreError, match="never set"):
        LocalStore().get("x")


def test_two_processes_exchange_through_the_store(tmp_path):
    script = tmp_path / "exchange.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            from blu.parallel.store import TCPStore
            r = int(os.environ["RANK"])
            s = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), 60)
            s.set(f"from{r}", str(100 + r).encode())
            other = int(s.get(f"from{1 - r}"))
            assert os.environ["NCCL_NVLS_ENABLE"] == "0"
            print(f"rank {r} of {os.environ['WORLD_SIZE']} got {other}", flush=True)
            """
        )
    )
    cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", "2", str(script)]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "rank 0 of 2 got 101" in res.stdout and "rank 1 of 2 got 100" in res.stdout


def test_launcher_stops_the_others_when_one_fails(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(3)\ntime.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", "2", str(script)]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert res.returncode == 3


def test_child_env_keeps_nvlink_multicast_off():
    env = child_env({"PATH": "/bin"}, 1, 4, "127.0.0.1", 1234)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "4" and env["LOCAL_RANK"] == "1"
    assert env["MASTER_PORT"] == "1234" and env["NCCL_NVLS_ENABLE"] == "0"
    assert child_env({"NCCL_NVLS_ENABLE": "0"}, 0, 1, "h", 1)["NCCL_NVLS_ENABLE"] == "0"


def test_rank_variables_of_slurm_and_open_mpi(monkeypatch):
    from blu.parallel import runtime

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    assert runtime._rank_world_local() == (3, 8, 1)
    for k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert runtime._rank_world_local() == (2, 4, 2)


# ---- collectives between processes --------------------------------------------------------------


def test_collectives_between_two_cpu_processes(tmp_path):
    out = _launch(tmp_path, 2, "cpu")
    assert "RANK 0 OK" in out and "RANK 1 OK" in out


def test_world_of_one_cpu_process_without_launcher(tmp_path):
    assert "RANK 0 OK" in _launch(tmp_path, 1, "cpu", launcher=False)


@pytest.mark.gpu
@pytest.mark.skipif(not nccl.available(), reason="needs nccl4py and an NVIDIA GPU")
def test_world_of_one_nccl(tmp_path):
    # the real NCCL calls (allreduce, allgather, reduce-scatter, send/recv) on one GPU
    assert "RANK 0 OK backend=nccl" in _launch(tmp_path, 1, "nccl")
    assert "RANK 0 OK backend=nccl" in _launch(tmp_path, 1, "nccl", launcher=False)


@pytest.mark.gpu
@pytest.mark.skipif(not nccl.available(), reason="needs nccl4py and an NVIDIA GPU")
def test_world_of_one_nccl_trains_in_every_mode():
    # DP, ZeRO-1, FSDP, TP, PP and 2-D GPT-2 steps on the GPU, collectives through NCCL; their
    # kernels are compiled by scripts/fill_gpu_cache.py (it runs the same script)
    cmd = [sys.executable, str(ROOT / "scripts" / "parallel_gpu_world1.py")]
    res = subprocess.run(cmd, env=_env(BLU_PARALLEL_BACKEND="nccl"), capture_output=True,
                         text=True, timeout=480, cwd=ROOT)  # fmt: skip
    assert res.returncode == 0 and "OK: every mode" in res.stdout, res.stdout + res.stderr
    assert "backend nccl" in res.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not nccl.available(), reason="needs nccl4py and an NVIDIA GPU")
def test_nccl_on_every_gpu(tmp_path):
    from cuda.bindings import driver as cu

    cu.cuInit(0)
    n = cu.cuDeviceGetCount()[1]
    if n < 2:
        pytest.skip("one GPU: the world-of-one test covers it")
    out = _launch(tmp_path, n, "nccl")
    assert all(f"RANK {r} OK" in out for r in range(n))


def test_unknown_backend_is_an_error(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("from blu import parallel as bp\nbp.initialize(backend='gloo')\n")
    res = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True,
                         timeout=60, cwd=ROOT)  # fmt: skip
    assert res.returncode != 0 and "unknown backend 'gloo'" in res.stderr
    assert np.isfinite(1.0)


def test_store_communicator_keeps_scalar_shapes():
    # np.ascontiguousarray makes a 0-d array (1,): a replicated scalar must come back as ()
    from blu.parallel.comm import StoreCommunicator

    c = StoreCommunicator(LocalStore(), [0], 0, "t")
    x = np.float32(2.5) * np.ones((), np.float32)
    for got in (c.all_reduce(x, "sum"), c.permute(x, [(0, 0)]), c.permute(x, [])):
        assert got.shape == () and got.dtype == np.float32
    assert c.all_reduce(x, "sum") == 2.5
    assert c.all_gather(x).shape == (1,) and c.all_gather(x)[0] == 2.5
