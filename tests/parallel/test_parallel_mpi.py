"""Multi-process CPU jobs through MPI (mpi4py + the mpich wheel, from the ``test`` extra).

Every test starts real processes (``mpiexec -n N`` or ``python -m blu.parallel.launch --backend
mpi``), bounded by a subprocess timeout so that a hang fails instead of blocking CI:

- each collective at 2 and 4 processes (1-D and 2x2 meshes) against numpy on the global array;
- data-parallel, ZeRO-1, FSDP, tensor-parallel (with sequence parallelism), pipeline (1F1B)
  and 2-D (DP x TP, DP x PP) GPT-2 training (tiny config, 3 steps) giving the losses of one
  process on the same global batch;
- a rank that raises or exits early ends the job with a clear error, never a hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from blu.parallel import mpi

ROOT = Path(__file__).resolve().parents[2]

try:
    MPIEXEC = mpi.mpiexec() if mpi.available() else None
except mpi.MpiError:
    MPIEXEC = None
pytestmark = pytest.mark.skipif(
    MPIEXEC is None,
    reason="needs mpi4py and mpiexec (pip install 'blu[mpi]': mpi4py and the mpich wheel)",
)

TIMEOUT = 150  # seconds for one job: a hang fails the test instead of blocking CI

COLLECTIVES = textwrap.dedent(
    """
    import sys
    import numpy as np
    import ml_dtypes
    import blu
    from blu import parallel as bp
    from blu.parallel import P, NamedSharding

    bp.initialize()
    r, n = bp.process_index(), bp.process_count()
    assert bp.runtime.backend() == "mpi", bp.runtime.backend()

    def local(o):
        return np.asarray(o.addressable_shards[0].data if hasattr(o, "addressable_shards") else o)

    def close(got, want, dt, what):
        tol = 1e-2 if dt == ml_dtypes.bfloat16 else 1e-6
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, (what, got.shape, want.shape)
        assert np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol), what

    # ---- 1-D mesh: every collective, several dtypes, eager and jitted --------------------------
    mesh = bp.make_mesh((n,), ("x",))
    for dt in (np.float32, np.float64, ml_dtypes.bfloat16, np.int32):
        g = ((np.arange(n * n * 6) * 7) % 11 - 5).reshape(n * n, 6).astype(dt)
        blocks = g.reshape(n, n, 6)  # device j holds blocks[j]: (n, 6)
        perm = [(i, (i + 1) % n) for i in range(n)]
        xs = bp.device_put(g, NamedSharding(mesh, P("x")))

        def f(b):
            outs = (
                bp.psum(b, "x"),
                bp.pmax(b, "x"),
                bp.pmin(b, "x"),
                bp.all_gather(b, "x"),
                bp.all_gather(b, "x", axis=1, tiled=True),
                bp.psum_scatter(b, "x"),
                bp.ppermute(b, "x", perm),
                bp.all_to_all(b, "x", 0, 0),
                bp.axis_index("x")[None],
            )
            if dt in (np.float32, np.float64):
                outs += (bp.pmean(b, "x"),)
            return outs

        specs = (P(), P(), P(), P(), P(), P("x"), P("x"), P("x"), P("x"), P())
        s = blocks.astype(np.float64).sum(0)
        want = [
            s, blocks.max(0), blocks.min(0), blocks, np.concatenate(list(blocks), axis=1),
            s[r], blocks[(r - 1) % n], blocks[:, r], np.array([r]), s / n,
        ]
        specs = specs[: 10 if dt in (np.float32, np.float64) else 9]
        for how, fn in (("eager", bp.shard(f, mesh, P("x"), specs)),
                        ("jit", blu.jit(bp.shard(f, mesh, P("x"), specs)))):
            outs = fn(xs)
            for i, o in enumerate(outs):
                close(local(o), want[i], dt, (how, str(dt), i))

    # a replicated scalar keeps its shape () (eager and jitted), as on virtual devices
    xs = bp.device_put(np.arange(2.0 * n, dtype=np.float32), NamedSharding(mesh, P("x")))
    tot = lambda b: (bp.psum(b.sum(), "x"), bp.pmax(b.max(), "x"), bp.all_gather(b.sum(), "x"),
                     bp.ppermute(b.sum(), "x", [(i, (i + 1) % n) for i in range(n)])[None])
    for fn in (bp.shard(tot, mesh, P("x"), (P(), P(), P(), P("x"))),
               blu.jit(bp.shard(tot, mesh, P("x"), (P(), P(), P(), P("x"))))):
        s_, m_, g_, p_ = fn(xs)
        assert s_.shape == () and local(s_).shape == () and m_.shape == (), (s_.shape, m_.shape)
        assert g_.shape == (n,) and local(p_).shape == (1,), (g_.shape, local(p_).shape)
        close(local(s_), np.arange(2.0 * n).sum(), np.float32, "scalar psum")
        close(local(g_), np.arange(2.0 * n).reshape(n, 2).sum(1), np.float32, "scalar gather")

    # gradients inside shard (shard_map's rule): of the pmean-ed loss w.r.t. a replicated w,
    # the global gradient, eagerly and jitted
    w0 = np.linspace(-1, 1, 3).astype(np.float32)
    xb = np.linspace(0, 1, 4 * n * 3).reshape(4 * n, 3).astype(np.float32)
    step = lambda w, x: blu.grad(lambda w: bp.pmean(((x @ w) ** 2).mean(), "x"))(w)
    for fn in (bp.shard(step, mesh, (P(), P("x")), P()),
               blu.jit(bp.shard(step, mesh, (P(), P("x")), P()))):
        close(local(fn(w0, xb)), (2 * xb * (xb @ w0)[:, None]).mean(0), np.float32, "grad")

    # a tensor-parallel layer: w1's columns and w2's rows split over x, b2 replicated; the
    # gradient of the (replicated) loss inside shard against numpy's float64 backward pass
    rng = np.random.default_rng(0)
    xt, yt = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    tp = {"w1": rng.standard_normal((3, 2 * n)), "w2": rng.standard_normal((2 * n, 2)),
          "b2": rng.standard_normal(2)}
    hid = np.tanh(xt @ tp["w1"])
    d = 2 * (hid @ tp["w2"] + tp["b2"] - yt) / yt.size
    want = {"b2": d.sum(0), "w2": hid.T @ d, "w1": xt.T @ (d @ tp["w2"].T * (1 - hid**2))}
    tp_specs = {"w1": P(None, "x"), "w2": P("x", None), "b2": P()}

    def tp_grad(p, x, y):
        def loss(p):
            out = bp.psum(blu.numpy.tanh(x @ p["w1"]) @ p["w2"], "x") + p["b2"]
            return ((out - y) ** 2).mean()
        return blu.grad(loss)(p)

    tp32 = {k: v.astype(np.float32) for k, v in tp.items()}
    g = bp.shard(tp_grad, mesh, (tp_specs, P(), P()), tp_specs)(
        tp32, xt.astype(np.float32), yt.astype(np.float32))
    for k, w in (("b2", want["b2"]), ("w2", want["w2"][2 * r:2 * r + 2]),
                 ("w1", want["w1"][:, 2 * r:2 * r + 2])):
        assert np.allclose(local(g[k]), w, rtol=1e-5, atol=1e-6), ("tp", k, local(g[k]), w)

    # ---- a 2-D mesh: sub-communicators along each axis and over both ----------------------------
    if n == 4:
        mesh2 = bp.make_mesh((2, 2), ("a", "b"))
        g = np.arange(4 * 4 * 3, dtype=np.float32).reshape(8, 6)  # split 2 x 2 into (4, 3)
        blk = g.reshape(2, 4, 2, 3).transpose(0, 2, 1, 3)  # blk[i, j]: device (a=i, b=j)
        i, j = r // 2, r % 2

        def h(b):
            return (bp.psum(b, "a"), bp.psum(b, "b"), bp.psum(b, ("a", "b")),
                    bp.all_gather(b, "b"), bp.axis_index(("a", "b"))[None],
                    bp.ppermute(b, "a", [(0, 1), (1, 0)]))

        sp = (P(None, "b"), P("a"), P(), P("a"), P(("a", "b")), P("a", "b"))
        gs = bp.device_put(g, NamedSharding(mesh2, P("a", "b")))  # jit sees the local block
        outs = blu.jit(bp.shard(h, mesh2, P("a", "b"), sp))(gs)
        want = [blk[:, j].sum(0), blk[i, :].sum(0), blk.sum((0, 1)), blk[i], np.array([r]),
                blk[1 - i, j]]
        for k, (o, w) in enumerate(zip(outs, want)):
            close(local(o), w, np.float32, ("2-D", k))
    open(f"{sys.argv[1]}/ok{r}", "w").close()  # files: stdout lines may interleave
    """
)

# the jitted program's collectives are library nodes on the planned buffers (MPI writing into
# them: blu/lower/cpu/collectives.py), not host fallbacks, and equal numpy float64
COLLECTIVE_NODES = textwrap.dedent(
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
    perm = [(i, (i + 1) % n) for i in range(n)]

    def f(b):
        def ring(i, carry):  # a ring all-reduce: ppermute in a compiled loop body
            acc, msg = carry
            msg = bp.ppermute(msg, "x", perm)
            return acc + msg, msg
        return (bp.psum(b, "x"), bp.pmax(b, "x"), bp.pmin(b, "x"),
                bp.all_gather(b, "x"), bp.all_gather(b, "x", axis=2, tiled=True),
                bp.psum_scatter(b, "x", scatter_dimension=1, tiled=True),
                bp.all_to_all(b, "x", 1, 0, tiled=True), bp.ppermute(b, "x", perm[:1]),
                bp.axis_index("x"), blu.lax.fori_loop(0, n - 1, ring, (b, b))[0])

    specs = (P(), P(), P(), P(), P(), P("x"), P("x"), P("x"), P(), P("x"))
    for dt in (np.float64, ml_dtypes.bfloat16, np.int32):
        g = ((np.arange(n * 2 * 2 * n * 3) * 5) % 13 - 6).reshape(n * 2, 2 * n, 3).astype(dt)
        blocks = g.reshape(n, 2, 2 * n, 3).astype(np.float64)  # device j: blocks[j]
        fn = blu.jit(bp.shard(f, mesh, P("x"), specs))
        xs = bp.device_put(g, NamedSharding(mesh, P("x")))
        exe = fn.lower(xs, target="cpu").compile().executable
        labels = [nd.label() for nd in exe.plan.nodes]
        assert exe.fallbacks == [] and not any(l.startswith("fallback") for l in labels), labels
        assert any(l.startswith("loop") for l in labels), labels  # fallbacks counts its body's
        for name in ("psum", "pmax", "pmin", "all_gather", "reduce_scatter", "all_to_all",
                     "ppermute", "axis_index"):
            assert f"library[{name}]" in labels, (name, labels)
        s = blocks.sum(0)
        want = [s, blocks.max(0), blocks.min(0), blocks, np.concatenate(list(blocks), 2),
                s[:, 2 * r : 2 * r + 2], blocks[:, :, 2 * r : 2 * r + 2].reshape(2 * n, 2, 3),
                blocks[0] if r == 1 else 0 * blocks[0], r, s]
        for i, (o, w) in enumerate(zip(fn(xs), want)):
            got = np.asarray(o.addressable_shards[0].data if hasattr(o, "addressable_shards")
                             else o).astype(np.float64)
            tol = 1e-2 if dt == ml_dtypes.bfloat16 else 1e-12
            assert got.shape == np.shape(w), (dt, i, got.shape, np.shape(w))
            assert np.allclose(got, w, rtol=tol, atol=tol), (dt, i, got, w)
    open(f"{sys.argv[1]}/ok{r}", "w").close()
    """
)

TRAIN = textwrap.dedent(
    """
    import json
    import sys
    from blu import parallel as bp
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp
    from examples.parallel import fsdp

    bp.initialize()
    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size)
    mesh = bp.make_mesh((bp.process_count(),), ("data",))
    if sys.argv[1] == "fsdp":
        losses = fsdp.train(cfg, tok.encode(dp.TEXT), steps=3, batch=8, mesh=mesh)
    else:
        losses = dp.train(cfg, tok.encode(dp.TEXT), steps=3, batch=8, mesh=mesh,
                          zero1=sys.argv[1] == "zero1")
    # a file per rank: the ranks' stdout lines may interleave under mpiexec
    with open(f"{sys.argv[2]}/losses{bp.process_index()}.json", "w") as fh:
        json.dump(losses, fh)
    """
)

# TP, PP and 2-D meshes: the flags of examples/parallel/gpt2.py ("mesh|stages|sp", ";"-separated)
TRAIN_MODES = textwrap.dedent(
    """
    import json
    import sys
    from blu import parallel as bp
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp
    from examples.parallel import gpt2

    bp.initialize()
    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size)
    out = {}
    for flags in sys.argv[1].split(";"):
        mesh, stages, sp = flags.split("|")
        sizes = gpt2.parse_mesh(mesh, int(stages), bp.process_count())
        out[flags] = gpt2.train(cfg, tok.encode(dp.TEXT), 3, 8, gpt2.mode_of(sizes), sizes,
                                sequence_parallel=bool(sp))
    with open(f"{sys.argv[2]}/losses{bp.process_index()}.json", "w") as fh:
        json.dump(out, fh)
    """
)

DIES = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from blu import parallel as bp
    from blu.parallel import P

    bp.initialize()
    r, n = bp.process_index(), bp.process_count()
    mesh = bp.make_mesh((n,), ("x",))
    if r == 1:
        if sys.argv[1] == "raise":
            raise RuntimeError("rank 1 fails on purpose")
        os._exit(int(sys.argv[1]))
    bp.shard(lambda b: bp.psum(b, "x"), mesh, P("x"), P())(np.ones((n, 2), np.float32))
    print(f"RANK {r} WAS NOT STOPPED", flush=True)
    """
)


def _env() -> dict:
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "PMI_", "OMPI_", "PMIX_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BLU_NUM_CPU_DEVICES", None)
    env.pop("BLU_PARALLEL_BACKEND", None)  # under mpiexec the backend is chosen automatically
    # BLU_CACHE_DIR is inherited: the ranks share the session's compiled kernels
    return env


def _run(tmp_path: Path, body: str, nproc: int, *args: str, launcher: bool = False,
         env: dict | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    script = tmp_path / "job.py"
    script.write_text(body)
    if launcher:
        cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", str(nproc), "--backend",
               "mpi", str(script), *args]  # fmt: skip
    else:
        cmd = [MPIEXEC, "-n", str(nproc), sys.executable, str(script), *args]
    return subprocess.run(cmd, env={**_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=ROOT)  # fmt: skip


@pytest.mark.parametrize("nproc,launcher", [(2, True), (4, False)])
def test_every_collective_against_numpy(tmp_path, nproc, launcher):
    res = _run(tmp_path, COLLECTIVES, nproc, str(tmp_path), launcher=launcher)
    assert res.returncode == 0, res.stdout + res.stderr
    assert all((tmp_path / f"ok{r}").exists() for r in range(nproc)), res.stdout + res.stderr


def test_jitted_collectives_are_library_nodes(tmp_path):
    res = _run(tmp_path, COLLECTIVE_NODES, 2, str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert all((tmp_path / f"ok{r}").exists() for r in range(2)), res.stdout + res.stderr


@pytest.fixture(scope="module")
def one_process_losses():
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp

    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size)
    return dp.train(cfg, tok.encode(dp.TEXT), steps=3, batch=8, mesh=None)


@pytest.mark.parametrize("mode,nproc", [("dp", 2), ("zero1", 4), ("fsdp", 2)])
def test_gpt2_training_equals_one_process(tmp_path, one_process_losses, mode, nproc):
    res = _run(tmp_path, TRAIN, nproc, mode, str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    ref = np.asarray(one_process_losses)
    assert ref[-1] < ref[0]  # it trains
    for r in range(nproc):
        losses = json.loads((tmp_path / f"losses{r}.json").read_text())
        np.testing.assert_allclose(losses, ref, rtol=1e-5)


@pytest.mark.parametrize(
    "flags,nproc",
    [("model=2|1|sp;|2|", 2), ("data=2,model=2|1|;data=2|2|", 4)],
    ids=["tp_sp-pp", "dp_tp-dp_pp"],
)
def test_tp_pp_and_2d_training_equals_one_process(tmp_path, one_process_losses, flags, nproc):
    # jit's reference executor in the ranks: the unrolled 1F1B program takes a minute to
    # compile through MLIR (benchmarks/parallel_cpu.py runs it compiled)
    res = _run(tmp_path, TRAIN_MODES, nproc, flags, str(tmp_path), env={"BLU_JIT_BACKEND": "numpy"})
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(nproc):
        got = json.loads((tmp_path / f"losses{r}.json").read_text())
        assert sorted(got) == sorted(flags.split(";"))
        for f, losses in got.items():
            np.testing.assert_allclose(losses, one_process_losses, rtol=1e-5, err_msg=f)


@pytest.mark.parametrize(
    "how,launcher", [("raise", True), ("0", True), ("raise", False), ("3", False)]
)
def test_a_rank_that_dies_ends_the_job(tmp_path, how, launcher):
    # rank 0 waits in a psum for rank 1, which raises or exits: it must be ended
    res = _run(tmp_path, DIES, 2, how, launcher=launcher)
    out = res.stdout + res.stderr
    assert "WAS NOT STOPPED" not in out
    if how == "raise":
        assert res.returncode != 0, out
        # rank 1's own words, unless mpiexec dropped the ranks' forwarded output when the job
        # was aborted (seen under load: all of it in a README test run of session 7, all but
        # the first line of rank 1's traceback in session 8); the launcher then still names the
        # rank that did not finish, plain mpiexec says nothing, or the start of the traceback
        said = "rank 1 fails on purpose" in out and "aborting the MPI job" in out
        cut = not out.strip() or out.lstrip().startswith("Traceback (most recent call last)")
        dropped = "did not finish" in out if launcher else cut
        assert said or dropped, out
    if launcher:  # the launcher always reports it (mpiexec may return 0 for an exit code 0)
        assert res.returncode != 0 and "did not finish" in out, out
