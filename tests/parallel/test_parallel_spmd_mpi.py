"""jit over sharded arrays with one process per device (MPI): the GPT-2 training step
partitioned data-parallel and FSDP by its input shardings alone, on 2 and 4 processes, gives the
losses and parameters of the same step run unpartitioned in one process."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from tests.parallel.test_parallel_mpi import MPIEXEC, _run

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpi4py and mpiexec")

STEP = textwrap.dedent(
    """
    import dataclasses, json, sys
    import numpy as np
    import blu
    from blu import optim
    from blu.core import pytree
    from examples.gpt2 import model as M

    cfg = dataclasses.replace(M.CONFIGS["tiny"], vocab_size=96)
    params = M.init_params(cfg, blu.random.key(0))
    opt = optim.adamw(1e-2, weight_decay=0.1)
    state = opt.init(params)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 96, (8, cfg.n_ctx)).astype(np.int32)
    y = rng.integers(0, 96, (8, cfg.n_ctx)).astype(np.int32)

    def step(params, state, x, y):
        loss, g = blu.value_and_grad(lambda p: M.loss_fn(p, x, y, cfg))(params)
        params, state = opt.step(g, state, params)
        return params, state, loss

    def train(f, params, state):
        losses = []
        for _ in range(3):
            params, state, loss = f(params, state, x, y)
            losses.append(float(np.asarray(loss)))
        return losses, params
    """
)

JOB = STEP + textwrap.dedent(
    """
    from blu import parallel as bp
    from blu.parallel import NamedSharding, P, spmd

    bp.initialize()
    r, n = bp.process_index(), bp.process_count()
    mesh = bp.make_mesh((n,), ("data",))
    rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def fsdp(tree):
        def spec(p):
            for d, size in enumerate(np.shape(p)):
                if size % n == 0:
                    return NamedSharding(mesh, P(*([None] * d + ["data"])))
            return rep
        return pytree.tree_map(spec, tree)

    out = {}
    for mode in ("dp", "fsdp"):
        if mode == "dp":
            f = blu.jit(step, in_shardings=(rep, rep, batch, batch))
        else:
            ps, ss = fsdp(params), fsdp(state)
            f = blu.jit(step, in_shardings=(ps, ss, batch, batch), out_shardings=(ps, ss, rep))
        losses, p = train(f, params, state)
        kinds = {c.split()[0] for c in spmd.collectives(f)}
        # each process writes its blocks of the first parameter; the test reassembles them
        leaf = pytree.tree_leaves(p)[1]  # (a parameter whose rows FSDP splits)
        out[mode] = {"losses": losses, "kinds": sorted(kinds),
                     "block": np.asarray(leaf.addressable_shards[0].data).tolist()
                     if hasattr(leaf, "addressable_shards") else np.asarray(leaf).tolist()}
    with open(f"{sys.argv[1]}/rank{r}.json", "w") as fh:
        json.dump(out, fh)
    """
)


@pytest.fixture(scope="module")
def one_process():
    from blu.core.config import config

    scope: dict = {}
    exec(compile(STEP, "step", "exec"), scope)  # noqa: S102 - the jobs' own code, unpartitioned
    with config.override(jit_backend="numpy"):
        f = scope["blu"].jit(scope["step"])
        losses, params = scope["train"](f, scope["params"], scope["state"])
    return losses, np.asarray(scope["pytree"].tree_leaves(params)[1])


@pytest.mark.parametrize("nproc", [2, 4])
def test_partitioned_gpt2_step_on_processes_equals_one_process(tmp_path, one_process, nproc):
    res = _run(tmp_path, JOB, nproc, str(tmp_path), env={"BLU_JIT_BACKEND": "numpy"})
    assert res.returncode == 0, res.stdout + res.stderr
    want_losses, want_wpe = one_process
    for mode in ("dp", "fsdp"):
        blocks = []
        for r in range(nproc):
            got = json.loads((tmp_path / f"rank{r}.json").read_text())[mode]
            np.testing.assert_allclose(got["losses"], want_losses, rtol=1e-5)
            blocks.append(np.asarray(got["block"]))
            if mode == "dp":
                assert got["kinds"] == ["all-reduce"], got["kinds"]
            else:
                assert "reduce-scatter" in got["kinds"], got["kinds"]
        whole = blocks[0] if mode == "dp" else np.concatenate(blocks)  # FSDP: rows split
        np.testing.assert_allclose(whole, want_wpe, rtol=1e-4, atol=1e-6)
