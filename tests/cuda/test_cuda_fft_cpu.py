"""The GPU FFT (``blu.cuda.fft``: cuFFT plans, layouts, the inverse's scaling) on the CPU.

It runs end to end on a simulated device (``FakeDevice``, real host memory) whose cuFFT stand-in
reads and writes the buffers at the given addresses as cuFFT's documentation describes the
advanced layout (``inembed``/``onembed``, stride 1, distance the product of the embeds),
computes *unnormalized* transforms with numpy, and destroys a C2R input (NaN) as cuFFT may; the
cuBLAS stand-in scales in place. Results are checked against numpy float64/complex128. The same
calls on the real libraries are tested in test_cuda_fft_gpu.py.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu.cuda as bc
from blu.core.errors import BluValueError
from blu.cuda import fft, solver
from blu.cuda.fake import FakeDevice


def buf(ptr: int, count: int, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if count == 0:
        return np.empty(0, dtype)
    return np.ndarray((count,), dtype, (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr))


class FakeCufft:
    """``create``, ``make_plan_many64``, ``set_stream``, ``exec_*``, ``destroy``."""

    def __init__(self):
        self.plans: dict[int, dict] = {}
        self.calls: list[str] = []

    def create(self) -> int:
        h = 500 + len(self.plans)
        self.plans[h] = {}
        return h

    def destroy(self, h):
        self.plans.pop(h)

    def make_plan_many64(self, h, rank, n, inembed, istride, idist, onembed, ostride, odist,
                         ctype, batch):  # fmt: skip
        assert rank == len(n) == len(inembed) == len(onembed) and istride == ostride == 1
        assert idist == math.prod(inembed) and odist == math.prod(onembed)
        self.plans[h].update(n=tuple(n), inembed=tuple(inembed), onembed=tuple(onembed),
                             type=ctype, batch=batch)  # fmt: skip
        return 0

    def set_stream(self, h, stream):
        self.plans[h]["stream"] = stream

    def _run(self, h, src, dst, ctype, direction=None):
        p = self.plans[h]
        assert p["type"] == ctype and "stream" in p
        kind = {fft.C2C: "c", fft.Z2Z: "c", fft.R2C: "r", fft.D2Z: "r", fft.C2R: "i", fft.Z2D: "i"}
        single = ctype in (fft.C2C, fft.R2C, fft.C2R)
        cdt, rdt = (np.complex64, np.float32) if single else (np.complex128, np.float64)
        ind = rdt if kind[ctype] == "r" else cdt
        outd = rdt if kind[ctype] == "i" else cdt
        b, n = p["batch"], p["n"]
        x = buf(src, b * math.prod(p["inembed"]), ind).reshape((b,) + p["inembed"])
        axes = tuple(range(1, len(n) + 1))
        if kind[ctype] == "c":
            y = (
                np.fft.fftn(x, axes=axes)
                if direction == fft.FORWARD
                else (np.fft.ifftn(x, axes=axes) * math.prod(n))
            )  # unnormalized
        elif kind[ctype] == "r":
            y = np.fft.rfftn(x, s=n, axes=axes)
        else:
            y = np.fft.irfftn(x, s=n, axes=axes) * math.prod(n)
            x[...] = np.nan  # C2R may overwrite its input
        buf(dst, b * math.prod(p["onembed"]), outd)[...] = y.astype(outd).reshape(-1)
        self.calls.append(hex(ctype))

    def __getattr__(self, name):
        ctype = {
            "exec_c2c": fft.C2C,
            "exec_z2z": fft.Z2Z,
            "exec_r2c": fft.R2C,
            "exec_d2z": fft.D2Z,
            "exec_c2r": fft.C2R,
            "exec_z2d": fft.Z2D,
        }.get(name)
        if ctype is None:
            raise AttributeError(name)
        return lambda h, src, dst, *d: self._run(h, src, dst, ctype, *d)


class FakeBlas:
    def __init__(self):
        self.streams = {}

    def create(self):
        return 1

    def set_stream(self, h, s):
        self.streams[h] = s

    def __getattr__(self, name):
        dt = {
            "csscal": (np.complex64, np.float32),
            "zdscal": (np.complex128, np.float64),
            "sscal": (np.float32, np.float32),
            "dscal": (np.float64, np.float64),
        }.get(name)
        if dt is None:
            raise AttributeError(name)

        def scal(h, n, alpha, x, incx):
            assert incx == 1 and h in self.streams
            buf(x, n, dt[0])[...] *= buf(alpha, 1, dt[1])[0]

        return scal


class FakeDn:
    def create(self):
        return 2

    def set_stream(self, h, s):
        pass


@pytest.fixture
def dev():
    d = FakeDevice()
    lib = FakeCufft()
    solver.use_libraries(d, FakeDn(), FakeBlas())
    fft.plans(d, lib)
    yield d
    solver._HANDLES.pop(d, None)
    fft._PLANS.pop(d, None)


def run(d, x, fft_type, lengths):
    from blu.core.aval import ShapedArray
    from blu.lax.fft import _fft_abstract_eval

    out = _fft_abstract_eval(ShapedArray(x.shape, x.dtype), fft_type=fft_type,
                             fft_lengths=tuple(lengths))  # fmt: skip
    src = bc.device_put(np.ascontiguousarray(x), d)
    dst = bc.DeviceArray.empty(out.shape, out.dtype, d)
    ws_n = fft.workspace_bytes(x.shape, x.dtype, fft_type)
    ws = bc.DeviceArray.empty((max(ws_n, 1),), np.uint8, d)
    fft.execute(d, d.stream_id, src.ptr, dst.ptr, ws.ptr, x.shape, x.dtype, fft_type, lengths)
    return np.asarray(src), np.asarray(dst)


def reference(x, fft_type, lengths):
    x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    return {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn,
            "IRFFT": np.fft.irfftn}[fft_type](x, s=lengths, axes=axes)  # fmt: skip


def sample(rng, shape, fft_type, single):
    if fft_type == "RFFT":
        return rng.standard_normal(shape).astype(np.float32 if single else np.float64)
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return z.astype(np.complex64 if single else np.complex128)


@settings(max_examples=25, deadline=None)
@given(
    fft_type=st.sampled_from(["FFT", "IFFT", "RFFT", "IRFFT"]),
    batch=st.lists(st.integers(0, 3), max_size=2),
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    single=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_type_against_numpy(fft_type, batch, lengths, single, seed):
    d = FakeDevice()
    solver.use_libraries(d, FakeDn(), FakeBlas())
    fft.plans(d, FakeCufft())
    try:
        in_trailing = list(lengths)
        if fft_type == "IRFFT":
            in_trailing[-1] = lengths[-1] // 2 + 1
        x = sample(np.random.default_rng(seed), tuple(batch) + tuple(in_trailing), fft_type,
                   single)  # fmt: skip
        before = x.copy()
        src, got = run(d, x, fft_type, lengths)
        want = reference(x, fft_type, lengths)
        tol = (1e-5 if single else 1e-12) * max(1.0, math.prod(lengths))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        np.testing.assert_array_equal(src, before)  # the input survives (C2R works on a copy)
    finally:
        solver._HANDLES.pop(d, None)
        fft._PLANS.pop(d, None)


def test_plans_are_made_once_per_layout(dev):
    x = sample(np.random.default_rng(0), (2, 8), "FFT", True)
    for _ in range(3):
        run(dev, x, "FFT", (8,))
    run(dev, x, "IFFT", (8,))  # the same C2C plan, the other direction
    run(dev, sample(np.random.default_rng(1), (3, 8), "FFT", True), "FFT", (8,))
    lib = fft.plans(dev).lib
    assert len(lib.plans) == 2  # batch 2 and batch 3
    assert all(p["stream"] == dev.stream_id for p in lib.plans.values())


def test_empty_transforms_write_zeros(dev):
    _, got = run(dev, np.zeros((2, 0), np.complex64), "FFT", (0,))
    assert got.shape == (2, 0)
    _, got = run(dev, np.zeros((0, 4), np.float32), "RFFT", (4,))
    assert got.shape == (0, 3)


def test_unknown_pairs_are_clear_errors():
    with pytest.raises(BluValueError, match="no cuFFT transform RFFT of complex64"):
        fft.cufft_type("RFFT", np.complex64)


def test_fft_is_a_library_node_on_both_targets():
    import blu
    import blu.numpy as bnp
    from blu.lax.fft import fft_p
    from blu.lower import library
    from blu.lower.cuda import libraries  # noqa: F401  (registers the CUDA lowerings)

    jaxpr = blu.make_jaxpr(lambda x: bnp.fft.rfft(x))(np.ones((3, 8), np.float32)).jaxpr
    (eqn,) = [e for e in jaxpr.eqns if e.primitive is fft_p]
    lw = library.lowering_for(eqn, "cuda:sm_90")
    cpu = library.lowering_for(eqn, "cpu")  # pocketfft into the planned buffer (cpu/libraries)
    assert lw is not None and lw.graph_safe and cpu is not None and cpu is not lw
    assert lw.workspace([eqn.invars[0].aval], eqn.params, "cuda:sm_90") == 0
    # the simulated device's form writes numpy's transform into the planned buffer
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    out = np.empty((3, 5), np.complex64)
    lw.cpu([x], [out], None, **eqn.params)
    np.testing.assert_allclose(out, np.fft.rfft(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
