"""Per-layer fused attention on the GPU: blu's cuDNN path beside PyTorch's SDPA backends.

    PYTHONPATH=. python3 benchmarks/attention.py [--batch 16 --seq 1024 --heads 12 --head-dim 64]
                                                 [--iters 50] [--no-causal]

At GPT-2 124M's shape (B=16, 12 heads of 64, T=1024, causal) by default, bfloat16 and float32,
one attention layer, forward and forward+backward, in microseconds (mean over ``--iters`` after
warm-up; the GPU is synchronized before and after each timed loop, so launches overlap as in a
training step). Rows:

- ``blu cudnn runtime``: ``blu.cuda.cudnn_attention.forward/backward`` on buffers from blu's
  allocator (bf16/fp16 only);
- ``blu jit``: ``blu.jit(nn.dot_product_attention)`` and ``blu.jit(grad)`` on DeviceArrays —
  whatever lowering blu chooses (cuDNN for bf16 once the attention lowering is wired, its
  decomposition for fp32);
- ``torch sdpa <backend>``: ``F.scaled_dot_product_attention`` restricted to one backend with
  ``torch.nn.attention.sdpa_kernel`` (cudnn, flash, efficient, math), on ``(B, T, N, H)`` memory
  viewed as ``(B, N, T, H)`` (as GPT-2 implementations do).

Nothing here is required: a missing package, an unsupported dtype or a failure prints
``n/a (why)`` in its row and the table still prints. The last column checks each forward
against PyTorch's math backend in float32 (max abs difference).
"""

from __future__ import annotations

import argparse
import math
import time
import traceback
from collections.abc import Callable

import numpy as np


def _fmt(x: float | str) -> str:
    return f"{x:10.1f}" if isinstance(x, float) else f"{x:>10}"


class Bench:
    def __init__(self, args):
        self.a = args
        self.rows: list[tuple[str, str, float | str, float | str, str]] = []
        rng = np.random.default_rng(0)
        b, t, n, h = args.batch, args.seq, args.heads, args.head_dim
        self.host = {name: rng.normal(size=(b, t, n, h)).astype(np.float32)
                     for name in ("q", "k", "v", "dout")}  # fmt: skip
        self.scale = 1.0 / math.sqrt(h)
        self.ref = None  # torch float32 math output, (B, T, N, H) numpy

    def time(self, fn: Callable[[], None], sync: Callable[[], None]) -> float:
        for _ in range(3):
            fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(self.a.iters):
            fn()
        sync()
        return 1e6 * (time.perf_counter() - t0) / self.a.iters

    def add(self, name, dtype, fwd, fwd_bwd, check):
        self.rows.append((name, dtype, fwd, fwd_bwd, check))

    def soft(self, name: str, dtype: str, body: Callable[[], tuple]) -> None:
        try:
            self.add(name, dtype, *body())
        except Exception as e:  # noqa: BLE001 - report and go on
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:90]
            self.add(name, dtype, "n/a", "n/a", why)
            if self.a.verbose:
                traceback.print_exc()

    def diff(self, out_bthd: np.ndarray) -> str:
        if self.ref is None:
            return "-"
        return f"max|d|={np.abs(out_bthd.astype(np.float32) - self.ref).max():.2e}"

    # ---- torch ---------------------------------------------------------------------------------

    def torch_rows(self) -> None:
        try:
            import torch
            import torch.nn.functional as F
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except Exception as e:  # noqa: BLE001
            self.add("torch sdpa", "-", "n/a", "n/a", f"no torch ({e})")
            return
        if not torch.cuda.is_available():
            self.add("torch sdpa", "-", "n/a", "n/a", "torch sees no GPU")
            return
        causal = not self.a.no_causal

        def tensors(dt):
            return {k: torch.from_numpy(v).to("cuda", dt) for k, v in self.host.items()}

        with sdpa_kernel(SDPBackend.MATH):  # the float32 reference for the check column
            x = tensors(torch.float32)
            o = F.scaled_dot_product_attention(*(x[k].transpose(1, 2) for k in "qkv"),
                                               is_causal=causal)  # fmt: skip
            self.ref = o.transpose(1, 2).cpu().numpy()
        backends = [("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"),
                    ("efficient", "EFFICIENT_ATTENTION"), ("math", "MATH")]  # fmt: skip
        for dt_name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            for label, attr in backends:

                def body(dt=dt, attr=attr):
                    backend = getattr(SDPBackend, attr)
                    x = tensors(dt)
                    leaves = [x[k].clone().requires_grad_(True) for k in "qkv"]
                    views = lambda: [a.transpose(1, 2) for a in leaves]
                    dout = x["dout"].transpose(1, 2)
                    sync = torch.cuda.synchronize
                    with sdpa_kernel(backend), torch.no_grad():
                        out = F.scaled_dot_product_attention(*views(), is_causal=causal)
                        tf = self.time(
                            lambda: F.scaled_dot_product_attention(*views(), is_causal=causal),
                            sync,
                        )
                    check = self.diff(out.transpose(1, 2).float().cpu().numpy())

                    def fb():
                        o = F.scaled_dot_product_attention(*views(), is_causal=causal)
                        o.backward(dout)

                    with sdpa_kernel(backend):
                        tfb = self.time(fb, sync)
                    return tf, tfb, check

                self.soft(f"torch sdpa {label}", dt_name, body)

    # ---- blu -----------------------------------------------------------------------------------

    def blu_rows(self) -> None:
        try:
            import ml_dtypes

            import blu.cuda as bc
            from blu.cuda import cudnn_attention as sdpa
            from blu.cuda.array import DeviceArray
        except Exception as e:  # noqa: BLE001
            self.add("blu", "-", "n/a", "n/a", f"blu.cuda does not import ({e})")
            return
        if not bc.is_available():
            self.add("blu", "-", "n/a", "n/a", "blu sees no GPU")
            return
        dev = bc.devices()[0]
        a = self.a
        b, t, n, h = a.batch, a.seq, a.heads, a.head_dim
        causal = not a.no_causal
        sync = dev.synchronize

        def runtime(np_dt, name):
            def body():
                spec = sdpa.SdpaSpec(b, t, t, n, n, h, h, name, causal, self.scale)
                d = {k: bc.device_put(v.astype(np_dt), dev) for k, v in self.host.items()}
                out = DeviceArray.empty((b, t, n, h), np_dt, dev)
                lse = DeviceArray.empty((b, n, t), np.float32, dev)
                grads = [DeviceArray.empty((b, t, n, h), np_dt, dev) for _ in range(3)]
                nbytes = max(sdpa.workspace_size(spec, False), sdpa.workspace_size(spec, True))
                ws = DeviceArray.empty((max(nbytes, 1),), np.uint8, dev)
                common = dict(q=d["q"].ptr, k=d["k"].ptr, v=d["v"].ptr, out=out.ptr, lse=lse.ptr,
                              workspace=ws.ptr, stream=dev.stream_id)  # fmt: skip
                fwd = lambda: sdpa.forward(spec, **common)
                bwd = lambda: sdpa.backward(spec, dout=d["dout"].ptr, dq=grads[0].ptr,
                                            dk=grads[1].ptr, dv=grads[2].ptr, **common)  # fmt: skip
                tf = self.time(fwd, sync)
                check = self.diff(np.asarray(out))
                tfb = self.time(lambda: (fwd(), bwd()), sync)
                return tf, tfb, check

            self.soft("blu cudnn runtime", "bf16" if name == "bfloat16" else name, body)

        runtime(ml_dtypes.bfloat16, "bfloat16")
        self.add("blu cudnn runtime", "fp32", "n/a", "n/a", "cuDNN SDPA takes bf16/fp16 only")

        def jitted(np_dt, label):
            def body():
                d = {k: bc.device_put(v.astype(np_dt), dev) for k, v in self.host.items()}
                f, g = jit_programs(causal)
                out = f(d["q"], d["k"], d["v"])
                tf = self.time(lambda: f(d["q"], d["k"], d["v"]), sync)
                check = self.diff(np.asarray(out))
                tfb = self.time(lambda: g(d["q"], d["k"], d["v"], d["dout"]), sync)
                return tf, tfb, check

            self.soft("blu jit", label, body)

        jitted(ml_dtypes.bfloat16, "bf16")
        jitted(np.float32, "fp32")

    def print(self) -> None:
        a = self.a
        print(f"\nattention per layer: B={a.batch} T={a.seq} heads={a.heads}x{a.head_dim} "
              f"{'causal' if not a.no_causal else 'full'}, mean of {a.iters} (us)")  # fmt: skip
        print(f"{'implementation':<26}{'dtype':<6}{'forward':>10}{'fwd+bwd':>10}  check")
        for name, dt, tf, tfb, check in self.rows:
            print(f"{name:<26}{dt:<6}{_fmt(tf)}{_fmt(tfb)}  {check}")


def jit_programs(causal: bool) -> tuple:
    """The jitted forward ``f(q, k, v)`` and gradient ``g(q, k, v, dout)`` (of
    ``sum(attention(q, k, v) * dout)`` with respect to q, k and v) the ``blu jit`` rows time."""
    import blu
    from blu import nn

    f = blu.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=causal))

    def loss(q, k, v, dout):
        o = nn.dot_product_attention(q, k, v, is_causal=causal)
        return (o.astype(np.float32) * dout.astype(np.float32)).sum()

    return f, blu.jit(blu.grad(loss, argnums=(0, 1, 2)))


def fill_cache(
    batch: int = 16,
    seq: int = 1024,
    heads: int = 12,
    head_dim: int = 64,
    causal: bool = True,
    target: str = "cuda:sm_90",
) -> None:
    """Compile the ``blu jit`` rows' programs (bf16 and fp32) for ``target`` into the kernel cache
    (``BLU_CACHE_DIR``), so the GPU machine (no MLIR) finds them."""
    import ml_dtypes

    import blu

    for dt in (ml_dtypes.bfloat16, np.float32):
        spec = blu.ShapeDtypeStruct((batch, seq, heads, head_dim), np.dtype(dt))
        f, g = jit_programs(causal)
        f.lower(spec, spec, spec, target=target).compile()
        g.lower(spec, spec, spec, spec, target=target).compile()
        print(f"[attention] {np.dtype(dt).name}: programs compiled for {target}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    bench = Bench(ap.parse_args())
    try:
        bench.torch_rows()  # first: its float32 math output is the check column's reference
        bench.blu_rows()
    finally:
        bench.print()


if __name__ == "__main__":
    main()
