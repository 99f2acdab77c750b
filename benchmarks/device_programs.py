"""Programs that used to leave the GPU (issue #34's host fallbacks), timed on the device, with
JAX's time for the same program in the same process.

    python benchmarks/device_programs.py                 # blu on the GPU (DeviceArray inputs)
    python benchmarks/device_programs.py --vs-jax        # and JAX's jitted program beside it
    python benchmarks/device_programs.py --only fft,cumsum_rows
    python benchmarks/device_programs.py --fill          # compile blu's kernels for cuda:sm_90
                                                         # (the GPU machine has no MLIR)

Each program is jitted and called with its inputs already on the device; the figure is the median
of ``--reps`` calls after three warm-up calls, each waited for (``block_until_ready``), in ms.
The programs (float32 unless named):

- ``kv_step``: one decode step's cache update, ``dynamic_update_slice`` of a (12, 1, 64) row into
  a (12, 1024, 64) cache at a traced position (the cache donated);
- ``kv_loop``: a 128-step ``fori_loop`` writing one row per step into that cache;
- ``take_along_axis``: 50 entries per row of a (4096, 8192) array;
- ``fft``: ``rfft`` then ``irfft`` of (64, 16384) rows (cuFFT);
- ``fft_c2c``: ``fft`` of (64, 16384) complex64 rows;
- ``lgamma``: ``lgamma`` of a (4096, 4096) array;
- ``cumsum_rows`` / ``cumsum_cols``: ``cumsum`` of a (4096, 4096) array along axis 1 / axis 0;
- ``fori_loop``: 1,000 steps of ``v * 0.999 + 1`` on 1,024 floats (control flow);
- ``while_loop``: the same as a ``while_loop`` on a counter (the trip count is data);
- ``scan_rnn``: a 256-step RNN ``scan``, ``h = tanh(h @ W + x_t)``, (32, 256) state;
- ``sort``: ``sort`` of 2**20 floats;
- ``top_k``: the 50 largest of each row of a (4096, 32000) array (values and indices);
- ``complex_mul``: ``x * w`` of (2048, 2048) complex64 arrays.

A program whose primitive still runs on the host says so in the ``where`` column (from
``blu.lower.lowering.host_fallbacks`` and the CUDA lowerings): its time includes the round trip.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blu  # noqa: E402
import blu.numpy as bnp  # noqa: E402
from blu import lax  # noqa: E402

H, T, D = 12, 1024, 64


def _kv_step(cache, row, pos):
    return lax.dynamic_update_slice(cache, row, (0, pos, 0))


def _kv_loop(cache, rows):
    def body(i, c):
        return lax.dynamic_update_slice(c, lax.dynamic_slice_in_dim(rows, i, 1, 1), (0, i, 0))

    return lax.fori_loop(0, 128, body, cache)


def _fori(x):
    return lax.fori_loop(0, 1000, lambda i, v: v * 0.999 + 1.0, x)


def _while(x):
    # the trip count is data to the compiler: the predicate is read on the device (or host)
    return lax.while_loop(lambda c: c[0] < 1000, lambda c: (c[0] + 1, c[1] * 0.999 + 1.0),
                          (np.int32(0), x))[1]  # fmt: skip


def _rnn(h, xs, w):
    def step(h, x):
        h = bnp.tanh(h @ w + x)
        return h, h

    return lax.scan(step, h, xs)[0]


def programs() -> dict[str, tuple[Callable, Callable, tuple[int, ...], str]]:
    """name -> (blu function, inputs maker (rng -> numpy arrays), donated argnums, primitive)."""
    return {
        "kv_step": (
            _kv_step,
            lambda r: (
                r.standard_normal((H, T, D), np.float32),
                r.standard_normal((H, 1, D), np.float32),
                np.int32(517),
            ),
            (0,),
            "dynamic_update_slice",
        ),  # fmt: skip
        "kv_loop": (
            _kv_loop,
            lambda r: (np.zeros((H, T, D), np.float32), r.standard_normal((H, 128, D), np.float32)),
            (),
            "dynamic_update_slice",
        ),  # fmt: skip
        "take_along_axis": (
            lambda x, i: bnp.take_along_axis(x, i, axis=1),
            lambda r: (
                r.standard_normal((4096, 8192), np.float32),
                r.integers(0, 8192, (4096, 50)).astype(np.int32),
            ),
            (),
            "take_along_axis",
        ),  # fmt: skip
        "fft": (
            lambda x: bnp.fft.irfft(bnp.fft.rfft(x), n=16384),
            lambda r: (r.standard_normal((64, 16384), np.float32),),
            (),
            "fft",
        ),  # fmt: skip
        "fft_c2c": (
            bnp.fft.fft,
            lambda r: (
                (r.standard_normal((64, 16384)) + 1j * r.standard_normal((64, 16384))).astype(
                    np.complex64
                ),
            ),
            (),
            "fft",
        ),  # fmt: skip
        "lgamma": (
            lax.lgamma,
            lambda r: (r.uniform(0.1, 20, (4096, 4096)).astype(np.float32),),
            (),
            "lgamma",
        ),  # fmt: skip
        "cumsum_rows": (
            lambda x: bnp.cumsum(x, axis=1),
            lambda r: (r.standard_normal((4096, 4096), np.float32),),
            (),
            "cumsum",
        ),
        "cumsum_cols": (
            lambda x: bnp.cumsum(x, axis=0),
            lambda r: (r.standard_normal((4096, 4096), np.float32),),
            (),
            "cumsum",
        ),
        "fori_loop": (_fori, lambda r: (r.standard_normal((1024,), np.float32),), (), "while"),
        "while_loop": (_while, lambda r: (r.standard_normal((1024,), np.float32),), (), "while"),
        "scan_rnn": (
            _rnn,
            lambda r: (
                r.standard_normal((32, 256), np.float32),
                r.standard_normal((256, 32, 256), np.float32),
                (r.standard_normal((256, 256)) / 16).astype(np.float32),
            ),
            (),
            "scan",
        ),  # fmt: skip
        "sort": (bnp.sort, lambda r: (r.standard_normal((1 << 20,), np.float32),), (), "sort"),
        "top_k": (
            lambda x: lax.top_k(x, 50),
            lambda r: (r.standard_normal((4096, 32000), np.float32),),
            (),
            "top_k",
        ),
        "complex_mul": (
            lambda x, w: x * w,
            lambda r: tuple(
                (r.standard_normal((2048, 2048)) + 1j * r.standard_normal((2048, 2048))).astype(
                    np.complex64
                )
                for _ in range(2)
            ),
            (),
            "mul",
        ),  # fmt: skip
    }


def _jax_programs():
    import jax
    import jax.numpy as jnp

    def rnn(h, xs, w):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x),) * 2, h, xs)[0]

    def kv_loop(cache, rows):
        def body(i, c):
            row = jax.lax.dynamic_slice_in_dim(rows, i, 1, 1)
            return jax.lax.dynamic_update_slice(c, row, (0, i, 0))

        return jax.lax.fori_loop(0, 128, body, cache)

    return jax, {
        "kv_step": (lambda c, r, p: jax.lax.dynamic_update_slice(c, r, (0, p, 0)), (0,)),
        "kv_loop": (kv_loop, ()),
        "take_along_axis": (lambda x, i: jnp.take_along_axis(x, i, axis=1), ()),
        "fft": (lambda x: jnp.fft.irfft(jnp.fft.rfft(x), n=16384), ()),
        "fft_c2c": (jnp.fft.fft, ()),
        "lgamma": (jax.lax.lgamma, ()),
        "cumsum_rows": (lambda x: jnp.cumsum(x, axis=1), ()),
        "cumsum_cols": (lambda x: jnp.cumsum(x, axis=0), ()),
        "fori_loop": (lambda x: jax.lax.fori_loop(0, 1000, lambda i, v: v * 0.999 + 1.0, x), ()),
        "while_loop": (
            lambda x: jax.lax.while_loop(
                lambda c: c[0] < 1000, lambda c: (c[0] + 1, c[1] * 0.999 + 1.0), (np.int32(0), x)
            )[1],
            (),
        ),  # fmt: skip
        "scan_rnn": (rnn, ()),
        "sort": (jnp.sort, ()),
        "top_k": (lambda x: jax.lax.top_k(x, 50), ()),
        "complex_mul": (lambda x, w: x * w, ()),
    }


def where(prim_name: str) -> str:
    """ "device" when the primitive has a CUDA lowering (kernel or library), else "host"."""
    from blu.core.primitive import Primitive
    from blu.lower.lowering import targets

    p = Primitive.registry.get(prim_name)
    return "?" if p is None else ("host" if targets(p)["cuda"] == "host fallback" else "device")


def _median_ms(call: Callable, sync: Callable, reps: int) -> float:
    for _ in range(3):
        sync(call())
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        sync(call())
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def fill(names: list[str], target: str = "cuda:sm_90") -> None:
    """Compile the blu programs' kernels for ``target`` into the cache (``BLU_CACHE_DIR``)."""
    rng = np.random.default_rng(0)
    for name in names:
        fn, make, donate, _ = programs()[name]
        args = make(rng)
        specs = [blu.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
        blu.jit(fn, donate_argnums=donate).lower(*specs, target=target).compile()
        print(f"[device_programs] {name}: compiled for {target}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--vs-jax", action="store_true")
    ap.add_argument("--fill", action="store_true", help="compile for cuda:sm_90 and exit")
    a = ap.parse_args()
    names = [n for n in (a.only.split(",") if a.only else programs()) if n]
    if a.fill:
        fill(names)
        return 0
    import blu.cuda as bc

    if not bc.is_available():
        print("no GPU: run on the GPU machine (or --fill here)")
        return 1
    dev = bc.devices()[0]
    jax = jprogs = None
    if a.vs_jax:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        try:
            jax, jprogs = _jax_programs()
        except ImportError as e:
            print(f"JAX not importable ({e}): blu only")
    print(f"device: {dev.properties.name}; median of {a.reps} calls (ms)")
    print("| program | where | blu ms | JAX ms | blu / JAX |\n| --- | --- | ---: | ---: | ---: |")
    for name in names:
        fn, make, donate, prim = programs()[name]
        host = make(np.random.default_rng(0))
        try:
            f = blu.jit(fn, donate_argnums=donate)
            if donate:  # a donated input is consumed: each call gets a fresh copy (not timed)
                held = [bc.device_put(np.asarray(x)) for x in host]

                def call(f=f, held=held, host=host):
                    held[0] = f(*held)
                    return held[0]

            else:
                dargs = [bc.device_put(np.asarray(x)) for x in host]

                def call(f=f, dargs=dargs):
                    return f(*dargs)

            ms = _median_ms(call, lambda out: blu.block_until_ready(out), a.reps)
            blu_ms = f"{ms:.3f}"
        except Exception as e:  # noqa: BLE001 - report and go on
            ms, blu_ms = None, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
        jax_ms = ratio = "-"
        if jprogs is not None:
            jfn, jdonate = jprogs[name]
            jf = jax.jit(jfn, donate_argnums=jdonate)
            jargs = [jax.device_put(np.asarray(x)) for x in host]
            if jdonate:

                def jcall(jf=jf, jargs=jargs):
                    jargs[0] = jf(*jargs)
                    return jargs[0]

            else:

                def jcall(jf=jf, jargs=jargs):
                    return jf(*jargs)

            jms = _median_ms(jcall, jax.block_until_ready, a.reps)
            jax_ms = f"{jms:.3f}"
            ratio = f"{ms / jms:.2f}x" if ms is not None else "-"
        print(f"| {name} | {where(prim)} | {blu_ms} | {jax_ms} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
