"""GPT-2 training-step throughput in JAX/XLA, measured as ``shared/reference/jax_gpt2.py`` does.

The anchor of DESIGN.md §5: GPT-2 with tied embeddings as a pure function over a dict of
parameters, ``jax.nn.dot_product_attention`` (causal), tanh GELU, LayerNorms in float32; optax
AdamW (lr 6e-4, decay 0.1 on leaves with ``ndim >= 2`` only); one ``jax.jit``-ed step with the
parameters and optimizer state donated; random tokens made once; ``--warmup`` steps, then
``--steps`` steps timed one by one (``block_until_ready``); tokens/s from the median step; peak
memory is XLA's ``peak_bytes_in_use`` of the process. ``--mode`` fp32 (matmul precision
"highest"), tf32 ("tensorfloat32"), bf16 (matrix products and activations in bfloat16, float32
master weights and LayerNorm statistics).

    python benchmarks/peers/jax_gpt2.py --mode bf16

The model size flags default to GPT-2 124M (vocabulary 50304, 12 layers, 12 heads, d=768,
context 1024). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import optax


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="fp32", choices=["fp32", "tf32", "bf16"])
    p.add_argument("--B", type=int, default=16, help="sequences per batch")
    p.add_argument("--T", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--n-ctx", type=int, default=1024)
    return p


def init(key, V: int, L: int, D: int, n_ctx: int) -> dict:
    ks = iter(jax.random.split(key, 8 + L * 8))
    n = lambda *s: 0.02 * jax.random.normal(next(ks), s, jnp.float32)  # noqa: E731

    def blk():
        return dict(
            ln1_g=jnp.ones(D),
            ln1_b=jnp.zeros(D),
            qkv_w=n(D, 3 * D),
            qkv_b=jnp.zeros(3 * D),
            proj_w=n(D, D),
            proj_b=jnp.zeros(D),
            ln2_g=jnp.ones(D),
            ln2_b=jnp.zeros(D),
            fc_w=n(D, 4 * D),
            fc_b=jnp.zeros(4 * D),
            out_w=n(4 * D, D),
            out_b=jnp.zeros(D),
        )

    return dict(
        wte=n(V, D),
        wpe=n(n_ctx, D),
        blocks=[blk() for _ in range(L)],
        lnf_g=jnp.ones(D),
        lnf_b=jnp.zeros(D),
    )


def ln(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def make_loss(H: int, cdt):
    def loss_fn(params, idx, tgt):
        B_, T_ = idx.shape
        D = params["wte"].shape[1]
        x = params["wte"][idx] + params["wpe"][:T_]
        for p_ in params["blocks"]:
            h = ln(x, p_["ln1_g"], p_["ln1_b"]).astype(cdt)
            qkv = h @ p_["qkv_w"].astype(cdt) + p_["qkv_b"].astype(cdt)
            q, k, v = jnp.split(qkv, 3, axis=-1)
            q, k, v = (t.reshape(B_, T_, H, D // H) for t in (q, k, v))
            y = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(B_, T_, D)
            x = x + (y @ p_["proj_w"].astype(cdt) + p_["proj_b"].astype(cdt)).astype(jnp.float32)
            h = ln(x, p_["ln2_g"], p_["ln2_b"]).astype(cdt)
            h = jax.nn.gelu(h @ p_["fc_w"].astype(cdt) + p_["fc_b"].astype(cdt), approximate=True)
            x = x + (h @ p_["out_w"].astype(cdt) + p_["out_b"].astype(cdt)).astype(jnp.float32)
        x = ln(x, params["lnf_g"], params["lnf_b"]).astype(cdt)
        logits = (x @ params["wte"].astype(cdt).T).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tgt).mean()

    return loss_fn


def main(argv: list[str] | None = None) -> dict:
    a = build_parser().parse_args(argv)
    precision = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "default"}[a.mode]
    jax.config.update("jax_default_matmul_precision", precision)
    cdt = jnp.bfloat16 if a.mode == "bf16" else jnp.float32
    loss_fn = make_loss(a.n_head, cdt)
    params = init(jax.random.PRNGKey(0), a.vocab, a.n_layer, a.d_model, a.n_ctx)
    nparams = sum(x.size for x in jax.tree.leaves(params))
    opt = optax.adamw(6e-4, weight_decay=0.1, mask=jax.tree.map(lambda x: x.ndim >= 2, params))
    state = opt.init(params)

    def step(params, state, x, y):
        l, g = jax.value_and_grad(loss_fn)(params, x, y)
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state, l

    step = jax.jit(step, donate_argnums=(0, 1))
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.randint(kx, (a.B, a.T), 0, a.vocab)
    y = jax.random.randint(ky, (a.B, a.T), 0, a.vocab)
    t0 = time.time()
    for _ in range(a.warmup):
        params, state, l = step(params, state, x, y)
    l.block_until_ready()
    warm_s = time.time() - t0
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        params, state, l = step(params, state, x, y)
        l.block_until_ready()
        times.append(time.perf_counter() - t)
    times.sort()
    med = times[len(times) // 2]
    dev = jax.devices()[0]
    peak = (dev.memory_stats() or {}).get("peak_bytes_in_use")
    out = dict(
        system="jax",
        mode=a.mode,
        B=a.B,
        T=a.T,
        params=int(nparams),
        tok_s=round(a.B * a.T / med),
        step_ms=round(med * 1e3, 2),
        peak_GiB=round(peak / 2**30, 3) if peak else None,
        warmup_s=round(warm_s, 1),
        loss=float(l),
        device=getattr(dev, "device_kind", dev.platform),
        version=jax.__version__,
    )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
