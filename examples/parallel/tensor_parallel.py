"""A tensor-parallel (Megatron-style) MLP with ``blu.shard``.

Shoeybi et al. 2019, "Megatron-LM", section 3: the first linear layer is split by columns and
the second by rows over the ``model`` axis, so each device computes ``gelu(x @ W1[:, cols])``
and its partial ``@ W2[cols, :]`` with no communication, and one ``psum`` per MLP sums the
partial outputs.

Gradients inside ``shard`` follow JAX's shard_map rule: the gradient of a loss that is equal
on every device (here the loss over the ``model`` axis, averaged over ``data`` with ``pmean``)
is the gradient of the global function. The sharded weights get their exact gradient, and the
replicated ``b2`` too: its partial gradients are summed over ``model`` by the transpose of the
implicit ``pvary`` where it meets the sharded values (Megatron's all-reduce of replicated
parameters' gradients). With a ``data`` axis too, the batch is split over it (2-d parallelism).

    BLU_NUM_CPU_DEVICES=4 python -m examples.parallel.tensor_parallel --model 2 --data 2
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import blu
import blu.numpy as bnp
from blu import nn
from blu import parallel as bp
from blu.core import pytree
from blu.parallel import P

MODEL, DATA = "model", "data"

# the layout of each parameter: W1 and b1 by columns, W2 by rows, b2 replicated
PARAM_SPECS = {"w1": P(None, MODEL), "b1": P(MODEL), "w2": P(MODEL, None), "b2": P()}


def init_mlp(key, d_model: int, d_hidden: int) -> dict:
    import blu.random as random

    k1, k2 = random.split(key)
    return {
        "w1": random.normal(k1, (d_model, d_hidden), np.float32) * np.float32(d_model**-0.5),
        "b1": bnp.zeros((d_hidden,), np.float32),
        "w2": random.normal(k2, (d_hidden, d_model), np.float32) * np.float32(d_hidden**-0.5),
        "b2": bnp.zeros((d_model,), np.float32),
    }


def mlp(params: dict, x: Any) -> Any:
    """The unsharded MLP: ``gelu(x @ w1 + b1) @ w2 + b2``; x is ``(B, d_model)``."""
    return nn.gelu(x @ params["w1"] + params["b1"], approximate=True) @ params["w2"] + params["b2"]


def mlp_block(params: dict, x: Any) -> Any:
    """One device's part: its columns of W1, its rows of W2, then the sum over ``model``."""
    h = nn.gelu(x @ params["w1"] + params["b1"], approximate=True)
    return bp.psum(h @ params["w2"], MODEL) + params["b2"]


def tp_mlp(mesh) -> Any:
    """The tensor-parallel MLP as a function of the global parameters and batch."""
    batch = P(DATA) if DATA in mesh.shape else P()
    return bp.shard(mlp_block, mesh, in_specs=(PARAM_SPECS, batch), out_specs=batch)


def tp_train_step(mesh, lr: float = 0.1):
    """One SGD step on the mean squared error, jitted; gradients stay sharded like the weights."""
    has_data = DATA in mesh.shape
    batch = P(DATA) if has_data else P()

    def step(params, x, y):
        def loss(p):  # the global loss: equal on every device
            local = bnp.mean((mlp_block(p, x) - y) ** 2)
            return bp.pmean(local, DATA) if has_data else local

        l, g = blu.value_and_grad(loss)(params)
        new = pytree.tree_map(lambda p, gi: p - lr * gi, params, g)
        return new, l

    sharded = bp.shard(
        step, mesh, in_specs=(PARAM_SPECS, batch, batch), out_specs=(PARAM_SPECS, P())
    )
    return blu.jit(sharded)


def main(argv: list[str] | None = None) -> list[float]:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", type=int, default=2, help="tensor-parallel degree")
    ap.add_argument("--data", type=int, default=1, help="data-parallel degree")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args(argv)
    import blu.random as random

    mesh = bp.make_mesh((a.data, a.model), (DATA, MODEL))
    params = init_mlp(random.key(0), a.width, 4 * a.width)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.width)).astype(np.float32)
    y = np.tanh(x[:, ::-1]).astype(np.float32)
    step = tp_train_step(mesh)
    losses = []
    for i in range(a.steps):
        params, loss = step(params, x, y)
        losses.append(float(loss))
        print(f"step {i + 1:3d}  loss {losses[-1]:.5f}", flush=True)
    return losses


if __name__ == "__main__":
    main(sys.argv[1:])
