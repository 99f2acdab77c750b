"""blu's float32 flash-attention kernels (``blu.lower.cuda.flash``) at several tile shapes,
launched directly on buffers from blu's allocator (no jit), checked against a float64 numpy
reference on a small problem and timed at GPT-2 124M's attention shape.

    # on a machine with MLIR: compile every variant into a kernel cache
    PYTHONPATH=. python3 benchmarks/flash_tiles.py --compile --cache .blu_cache-gpu
    # on the GPU (the cache carried along):
    PYTHONPATH=. BLU_CACHE_DIR=.blu_cache-gpu python3 benchmarks/flash_tiles.py

Variants: the CUDA-core kernels at several tilings and the tensor-core forwards
(``blu.lower.cuda.flash_tc``: ``mma=3xtf32``, float32 accuracy; ``mma=tf32``, one TF32 product
per multiply, whose errors are about 1e-3 rather than 1e-6; ``bwd_mma``: the backward's mode,
else the CUDA-core backward; ``tc_bwd_raw``, ``tc_bwd_pairs``, ``tc_bwd_prefetch``,
``tc_bwd_min_blocks``: the tensor-core backward's layout options, ``flash_tc.BWD_*``, whose
defaults the plain ``mma=3xtf32,bwd_mma=3xtf32`` row runs). The error columns: the largest
error of the forward's results (out, lse) and of the gradients, each relative to its largest
value, over two small problems.

Rows: forward and backward (the ``D`` launch and the main kernel) in microseconds, mean over
``--iters`` launches after a warm-up, CUDA events around each loop, and the achieved float32
TFLOP/s (the products' multiply-adds, causal blocks skipped: 4 T S H B N / 2 forward, 2.5x that
backward).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from blu.lower.cuda import flash as fg  # noqa: E402

# settings of blu.lower.cuda.flash to compare (module constants; the kernel cache keys
# of any but the defaults name them)
VARIANTS = [
    {},  # the CUDA-core kernels' defaults
    # tensor cores (flash_tc): 3xTF32 (float32 accuracy) and TF32, forward and backward, then
    # the forward alone (CUDA-core backward)
    {"mma": "3xtf32", "bwd_mma": "3xtf32"},
    {"mma": "tf32", "bwd_mma": "tf32"},
    {"mma": "3xtf32"},
    {"mma": "tf32"},
    # the TF32 forward without its default two-blocks-an-SM bound (158 registers, one block);
    # the 3xTF32 forward held to 128 registers (two blocks, some spills)
    {"mma": "tf32", "bwd_mma": "tf32", "tc_fwd_min_blocks": 0},
    {"mma": "3xtf32", "bwd_mma": "3xtf32", "tc_fwd_min_blocks": 2},
    # the tensor-core backward's layouts (flash_tc.BWD_*): main's before session 6's change
    # (3xTF32 split tiles, 219 KB, one block an SM; prefetch of the next Q, dO), then the
    # default's neighbours: two blocks an SM with the prefetch (some spills), with the paired
    # loads (the default until session 7), the split tiles with the paired loads; TF32 with the
    # paired loads
    {
        "mma": "3xtf32",
        "bwd_mma": "3xtf32",
        "tc_bwd_raw": False,
        "tc_bwd_pairs": False,
        "tc_bwd_prefetch": True,
        "tc_bwd_min_blocks": 0,
    },
    {"mma": "3xtf32", "bwd_mma": "3xtf32", "tc_bwd_prefetch": True},
    {"mma": "3xtf32", "bwd_mma": "3xtf32", "tc_bwd_pairs": True},
    {
        "mma": "3xtf32",
        "bwd_mma": "3xtf32",
        "tc_bwd_raw": False,
        "tc_bwd_pairs": True,
        "tc_bwd_prefetch": True,
        "tc_bwd_min_blocks": 0,
    },
    {
        "mma": "tf32",
        "bwd_mma": "tf32",
        "tc_bwd_pairs": True,
        "tc_bwd_prefetch": False,
        "tc_bwd_min_blocks": 2,
    },
    {"fwd_bm": 64, "bwd_bm": 32, "bwd_tx": 16, "unroll": 4},  # the first tiling
    {"unroll": 4},
    {"unroll": 16},
]


# variant keys that are no Tiling field
TC_KEYS = ("mma", "bwd_mma", "tc_fwd_min_blocks", "tc_bwd_min_blocks", "tc_bwd_raw",
           "tc_bwd_pairs", "tc_bwd_prefetch")  # fmt: skip


@contextlib.contextmanager
def settings(values: dict):
    """Kernels generated with these ``flash_gpu.Tiling`` fields overridden (and
    ``tc_fwd_min_blocks``/``tc_bwd_min_blocks``: ``flash_tc.MIN_BLOCKS`` of the tensor-core
    forward/backward; ``tc_bwd_raw``, ``tc_bwd_pairs``, ``tc_bwd_prefetch``: ``flash_tc``'s
    ``BWD_RAW``, and ``BWD_PAIRS``/``BWD_PREFETCH`` of the backward's mode)."""
    from blu.lower.cuda import flash_tc

    old, old_tc = dict(fg.OVERRIDE), dict(flash_tc.MIN_BLOCKS)
    old_bwd = (flash_tc.BWD_RAW, dict(flash_tc.BWD_PAIRS), dict(flash_tc.BWD_PREFETCH))
    fg.OVERRIDE.update({k: v for k, v in values.items() if k not in TC_KEYS})
    if "tc_fwd_min_blocks" in values:
        flash_tc.MIN_BLOCKS[("fwd", values["mma"])] = values["tc_fwd_min_blocks"]
    if "tc_bwd_min_blocks" in values:
        flash_tc.MIN_BLOCKS[("bwd", values["bwd_mma"])] = values["tc_bwd_min_blocks"]
    flash_tc.BWD_RAW = values.get("tc_bwd_raw", flash_tc.BWD_RAW)
    if "tc_bwd_pairs" in values:
        flash_tc.BWD_PAIRS[values["bwd_mma"]] = values["tc_bwd_pairs"]
    if "tc_bwd_prefetch" in values:
        flash_tc.BWD_PREFETCH[values["bwd_mma"]] = values["tc_bwd_prefetch"]
    try:
        yield
    finally:
        fg.OVERRIDE.clear()
        fg.OVERRIDE.update(old)
        flash_tc.MIN_BLOCKS.clear()
        flash_tc.MIN_BLOCKS.update(old_tc)
        flash_tc.BWD_RAW = old_bwd[0]
        for now, was in zip((flash_tc.BWD_PAIRS, flash_tc.BWD_PREFETCH), old_bwd[1:]):
            now.clear()
            now.update(was)


def specs(sp: fg.FlashSpec, var: dict) -> tuple[fg.FlashSpec, fg.FlashSpec]:
    """The forward's and the backward's spec of a variant (``mma``/``bwd_mma``: the tensor-core
    modes, ``flash_tc``)."""
    return (dataclasses.replace(sp, mma=var.get("mma", "")),
            dataclasses.replace(sp, mma=var.get("bwd_mma", "")))  # fmt: skip


def modules(fsp: fg.FlashSpec, bsp: fg.FlashSpec) -> tuple:
    from blu.lower.cuda import compiler as mlir_gpu

    return tuple(mlir_gpu.get_module(fg.canonical(sp, bw), lambda sym, sp=sp, bw=bw:
                                     fg.emit(sp, sym, bw), f"flash {sp} bwd={bw}")
                 for sp, bw in ((fsp, False), (bsp, True)))  # fmt: skip


def reference(q, k, v, dout, scale, causal):
    q, k, v, dout = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v, dout))
    s = q @ k.swapaxes(-1, -2) * scale
    if causal:
        t, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(t)[:, None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = (np.log(p.sum(-1, keepdims=True)) + m)[..., 0]
    p /= p.sum(-1, keepdims=True)
    out = p @ v
    dv = p.swapaxes(-1, -2) @ dout
    dp = dout @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    dq, dk = ds @ k, ds.swapaxes(-1, -2) @ q
    back = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
    return back(out), lse, back(dq), back(dk), back(dv)


def run(sp: fg.FlashSpec, var: dict, iters: int, check: bool) -> tuple[float, ...]:
    import blu.cuda as bc
    from blu.cuda.array import DeviceArray
    from blu.cuda.driver import Event
    from blu.lower.cuda.attention import _launch
    from blu.lower.cuda.run import _module

    dev = bc.devices()[0]
    dev.activate()
    fsp, bsp = specs(sp, var)
    fwd_m, bwd_m = (_module(dev, m) for m in modules(fsp, bsp))
    rng = np.random.default_rng(0)
    shape_q, shape_k = (sp.b, sp.t, sp.n, sp.h), (sp.b, sp.s, sp.kh, sp.h)
    host = [rng.normal(size=s).astype(np.float32) for s in (shape_q, shape_k, shape_k, shape_q)]
    q, k, v, dout = (bc.device_put(x, dev) for x in host)
    out = DeviceArray.empty(shape_q, np.float32, dev)
    lse = DeviceArray.empty((sp.b, sp.n, sp.t), np.float32, dev)
    dq = DeviceArray.empty(shape_q, np.float32, dev)
    dk, dv = (DeviceArray.empty(shape_k, np.float32, dev) for _ in range(2))
    dvec = DeviceArray.empty((sp.b, sp.n, sp.t), np.float32, dev)
    st = dev.stream_id

    def fwd():
        _launch(fwd_m, fwd_m.name, fsp, False, st, [[q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr]])

    def bwd():
        main = [q.ptr, k.ptr, v.ptr, lse.ptr, dout.ptr, dvec.ptr, dq.ptr, dk.ptr, dv.ptr]
        _launch(bwd_m, bwd_m.name, bsp, True, st, [[out.ptr, dout.ptr, dq.ptr, dvec.ptr], main])

    fwd()
    bwd()
    dev.synchronize()
    errs = [float("nan")] * 5
    if check:  # each result's largest error relative to its largest value (at least 1)
        want = reference(*host, sp.scale, sp.causal)
        got = [np.asarray(x) for x in (out, lse, dq, dk, dv)]
        errs = [float(np.abs(g - w).max() / max(1.0, np.abs(w).max())) for g, w in zip(got, want)]
    times = []
    for fn in (fwd, bwd):
        fn()
        a, b = Event.create(), Event.create()
        a.record(st)
        for _ in range(iters):
            fn()
        b.record(st)
        b.synchronize()
        times.append(a.elapsed_ms(b) * 1e3 / iters)
    return times[0], times[1], max(errs[:2]), max(errs[2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile", action="store_true", help="fill the kernel cache (needs MLIR)")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--only", type=int, default=None, help="run only this variant (its index)")
    a = ap.parse_args()
    if a.cache:
        from blu.core.config import config

        config.update("cache_dir", a.cache)
    big = fg.FlashSpec(a.batch, a.seq, a.seq, a.heads, a.heads, a.head_dim, True,
                       1.0 / np.sqrt(a.head_dim))  # fmt: skip
    small = [fg.FlashSpec(2, 200, 200, 4, 4, a.head_dim, True, 0.125),
             fg.FlashSpec(1, 70, 130, 2, 2, a.head_dim, False, 0.125)]  # fmt: skip
    flops = 4 * big.b * big.n * big.t * big.s * big.h / 2
    print(f"flash tiles at B={big.b} T={big.t} N={big.n} H={big.h} causal, float32")
    print(f"{'variant':>36} {'fwd us':>9} {'fwd TF/s':>9} {'bwd us':>9} "
          f"{'bwd TF/s':>9} {'fwd err (small)':>16} {'bwd err (small)':>16}")  # fmt: skip
    for vi, var in enumerate(VARIANTS):
        if a.only is not None and vi != a.only:
            continue
        name = ",".join(f"{k}={v}" for k, v in var.items()) or "defaults"
        with settings(var):
            if a.compile:
                for sp in [big, *small]:
                    modules(*specs(sp, var))
                continue
            try:
                errs = [run(sp, var, 1, True)[2:] for sp in small]
                f_us, b_us = run(big, var, a.iters, False)[:2]
                ferr, berr = (max(e[i] for e in errs) for i in (0, 1))
                print(f"{name:>36} {f_us:9.1f} {flops / f_us / 1e6:9.1f} "
                      f"{b_us:9.1f} {2.5 * flops / b_us / 1e6:9.1f} {ferr:16.2e} "
                      f"{berr:16.2e}")  # fmt: skip
            except Exception as e:  # noqa: BLE001 - a variant that fails still leaves a row
                print(f"{name:>36} failed: {type(e).__name__}: {e}"[:300])


if __name__ == "__main__":
    main()
