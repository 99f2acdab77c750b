"""The radix sort of long rows (``blu.lower.cuda.sort_radix``) checked without a GPU: a numpy
model of its passes (the same chunks, warp-major items, ballot ranks, counts scanned per digit
then per block) against ``np.argsort(kind="stable")`` / ``np.lexsort``, its pass list over the
dtypes' key bytes, and its kernels' PTX through ``ptxas`` where MLIR and ptxas exist. (The
simulated GPU of ``test_gpu_sort`` runs the numpy impl, not the kernels.)"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from blu.core import dtypes
from blu.lower.cuda import sort_kernels as sk
from blu.lower.cuda import sort_radix as sr
from blu.lower.cuda import sorting
from blu.lower.mlir import _mlir_available

bf16 = dtypes.bfloat16


def _key(x: np.ndarray, top_k: bool = False) -> np.ndarray:
    """``sort_kernels._Kernel.key`` in numpy: the order-preserving unsigned key (uint64)."""
    dt = x.dtype
    if dt.kind == "f" or dt == bf16:
        f = x.astype(np.float32) if dt in (bf16, np.float16) else x
        bits, ity = (32, np.uint32) if f.dtype == np.float32 else (64, np.uint64)
        f = np.where(f == 0, f.dtype.type(0), f)
        b = f.view(ity).copy()
        b[np.isnan(f)] = 2 ** (bits - 1) - 1
        neg = (b >> (bits - 1)) == 1
        key = np.where(neg, ~b, b | ity(1 << (bits - 1))).astype(np.uint64)
    else:
        bits = 8 * dt.itemsize
        key = x.view(f"u{dt.itemsize}").astype(np.uint64)
        if dt.kind == "i":
            key ^= np.uint64(1 << (bits - 1))
    return ~key if top_k else key


def _model(keys: list[np.ndarray], chunk: int, items: int, top_k: bool = False) -> np.ndarray:
    """The permutation the radix kernels produce for one row (``keys``: most significant first,
    like ``lax.sort``'s operands), modelling each kernel's arithmetic."""
    n = keys[0].size
    B = -(-n // chunk)
    ix = np.arange(n, dtype=np.int64)
    kbuf = None
    for q in range(len(keys)):
        x = keys[len(keys) - 1 - q]
        for i, shift in enumerate(sr.shifts(x.dtype)):
            if i == 0:  # "op" / "gather": the key read through the indices so far
                kbuf = _key(x, top_k)[ix]
            d = ((kbuf >> np.uint64(shift)) & np.uint64(255)).astype(np.int64)
            # rh: counts per block; rscan: block starts within a digit, digit starts in the row
            cnt = np.zeros((B, 256), np.int64)
            for b in range(B):
                cnt[b] = np.bincount(d[b * chunk : (b + 1) * chunk], minlength=256)
            tot = cnt.sum(0)
            db = np.concatenate([[0], np.cumsum(tot)[:-1]])
            excl = np.cumsum(cnt, 0) - cnt
            # rs: per chunk, warp w's item j lane l is key w*32*items + j*32 + l
            new_k, new_i = np.empty_like(kbuf), np.empty_like(ix)
            for b in range(B):
                hist = np.zeros((chunk // (32 * items), 256), np.int64)
                rank = np.full(chunk, -1, np.int64)
                for e0 in range(0, chunk, 32):
                    w = e0 // (32 * items)
                    lanes = [e for e in range(e0, e0 + 32) if b * chunk + e < n]
                    dl = [d[b * chunk + e] for e in lanes]
                    for lane, e in enumerate(lanes):  # ballots: peers, the ones below
                        peers = [m for m, v in enumerate(dl) if v == dl[lane]]
                        below = sum(m < lane for m in peers)
                        rank[e] = hist[w, dl[lane]] + below
                    for v in set(dl):  # the leaders' atomics
                        hist[w, v] += dl.count(v)
                counts = hist  # (warps, digits)
                start = np.concatenate([[0], np.cumsum(counts.sum(0))[:-1]])  # block_scan
                wstart = start + np.cumsum(counts, 0) - counts
                sg = db + excl[b] - start
                left = min(chunk, n - b * chunk)
                sk_, si_ = np.zeros(chunk, np.uint64), np.zeros(chunk, np.int64)
                for e in range(left):
                    loc = wstart[e // (32 * items), d[b * chunk + e]] + rank[e]
                    sk_[loc], si_[loc] = kbuf[b * chunk + e], ix[b * chunk + e]
                for s in range(left):
                    dd = int((sk_[s] >> np.uint64(shift)) & np.uint64(255))
                    pos = sg[dd] + s
                    new_k[pos], new_i[pos] = sk_[s], si_[s]
            kbuf, ix = new_k, new_i
    return ix


def _values(dt, n, seed):
    rng = np.random.default_rng(seed)
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -300), min(info.max, 300), n, endpoint=True).astype(dt)
    x = np.round(rng.standard_normal(n) * 4) / 2 * 10.0 ** rng.integers(-3, 4, n)
    for v in (np.nan, np.inf, -np.inf, -0.0, 0.0, -np.nan):
        x[rng.integers(0, n, max(1, n // 16))] = v
    return x.astype(dt)


DTS = [np.float32, np.float64, bf16, np.float16, np.int32, np.int64, np.uint8, np.int8,
       np.int16, np.bool_]  # fmt: skip


@pytest.mark.parametrize("dt", DTS, ids=[np.dtype(d).name for d in DTS])
def test_model_sorts_stably(dt):
    x = _values(dt, 1500, 0)
    wide = x.astype(np.float32) if dt in (bf16, np.float16) else x
    want = np.argsort(wide, kind="stable")
    np.testing.assert_array_equal(_model([x], 256, 2), want)  # 6 blocks, a partial one
    top = (x.size - 1 - np.argsort(wide[::-1], kind="stable"))[::-1]  # ties: lower index first
    np.testing.assert_array_equal(_model([x], 256, 2, top_k=True), top)


def test_model_several_keys():
    k0, k1, k2 = _values(np.float32, 900, 1), _values(np.int8, 900, 2), _values(bf16, 900, 3)
    want = np.lexsort([k2.astype(np.float32), k1, k0])
    np.testing.assert_array_equal(_model([k0, k1, k2], 128, 1), want)


def test_model_kernel_chunk():
    x = _values(np.float32, 3 * 4096 + 77, 4)
    np.testing.assert_array_equal(_model([x], 4096, 16), np.argsort(x, kind="stable"))


def test_passes():
    sp = sk.spec_of("sort", [np.zeros((1 << 20,), np.float32)], {"dimension": 0, "num_keys": 1})
    ps = sr.passes(sp)
    assert [(p.src, p.rd, p.wr, p.shift) for p in ps] == [
        ("op", 0, 0, 0), ("buf", 0, 1, 8), ("buf", 1, 0, 16), ("buf", 0, -1, 24)]  # fmt: skip
    avals = [np.zeros((2, 5000), d) for d in (np.float64, np.uint8, bf16)]
    sp = sk.spec_of("sort", avals, {"dimension": 1, "num_keys": 3})
    want = [(0, "op"), (0, "buf"), (1, "gather"), (2, "gather")] + [(2, "buf")] * 7
    assert [(p.q, p.src) for p in sr.passes(sp)] == want
    assert sr.passes(sp)[-1].wr == -1


@pytest.mark.skipif(not _mlir_available() or shutil.which("ptxas") is None,
                    reason="needs MLIR and ptxas")  # fmt: skip
@pytest.mark.parametrize("case", ["f32", "keys", "top_k", "i8"])
def test_radix_kernels_pass_ptxas(case):
    from blu.lower.cuda.compiler import compile_ptx, ptxas

    avals, params, name = {
        "f32": ([np.zeros((3, 5000), np.float32)], {"dimension": 1, "num_keys": 1}, "sort"),
        "keys": ([np.zeros((5000, 2), d) for d in (np.float64, np.int32, bf16)],
                 {"dimension": 0, "num_keys": 2}, "sort"),
        "top_k": ([np.zeros((2, 9000), np.float16)], {"k": 300}, "top_k"),
        "i8": ([np.zeros((7000,), np.int8)], {"dimension": 0, "num_keys": 1}, "sort"),
    }[case]  # fmt: skip
    sp = sk.spec_of(name, avals, params)
    assert sp.radix
    ptx = compile_ptx(sorting.emit(sp, "rs"), "sm_90")
    assert ptxas(ptx, "sm_90") is not None
    assert "vote.sync.ballot" in ptx.decode()
