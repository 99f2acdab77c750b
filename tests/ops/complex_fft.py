"""OpInfo entries: complex numbers (``blu.lax.complex``, ``blu.numpy.complexes``) and the FFT
(``blu.lax.fft``, ``blu.numpy.fft``); docs/array_api.md.

The table's tests feed float64 arrays and read float outputs, so each complex operation enters
as a function of the real and imaginary parts ``(x, y)`` of its input, giving the real and
imaginary parts of its output: derivatives then follow JAX's convention for complex numbers
automatically (they are derivatives of a real function). References are numpy's complex128.
"""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from blu import lax
from ops.base import NOT_OPERATIONS, nonempty_shape, op, rand_shape, uniform

NOT_OPERATIONS.update(
    {
        "numpy.complexes": "a submodule (its functions are re-exported and listed)",
        "numpy.fft": "a submodule (its functions are listed as fft.NAME)",
        "numpy.complex64": "a dtype",
        "numpy.complex128": "a dtype",
        "numpy.complexfloating": "an abstract dtype kind",
        "numpy.iscomplexobj": "dtype query, no array computation (tested in test_complex)",
        "numpy.isrealobj": "dtype query, no array computation (tested in test_complex)",
        "lax.FFT_TYPES": "a constant (the fft_type names)",
        "fft.fftfreq": "static frequencies, no array input (tested in test_fft)",
        "fft.rfftfreq": "static frequencies, no array input (tested in test_fft)",
    }
)


def _split(z):
    """(real, imag) of a complex result, for blu or numpy values."""
    if isinstance(z, np.ndarray) or np.isscalar(z):
        z = np.asarray(z, np.complex128)
        return z.real, z.imag
    return bnp.real(z), bnp.imag(z)


def _c2c(fn):
    """``fn`` of a complex array as a function of its parts, giving its result's parts."""
    return lambda x, y: _split(fn(lax.complex(x, y)))


def _np_c2c(fn):
    return lambda x, y: _split(fn(np.asarray(x) + 1j * np.asarray(y)))


def _pair(shape_fn=rand_shape, vals=None):
    vals = vals or uniform()

    def s(rng):
        shape = shape_fn(rng)
        return vals(rng, shape), vals(rng, shape)

    return s


# ---- complex parts -------------------------------------------------------------------------------

op(
    "numpy.conj",
    _c2c(bnp.conj),
    _np_c2c(np.conj),
    _pair(),
    covers=("numpy.conjugate", "numpy.real", "numpy.imag", "lax.complex", "lax.real",
            "lax.imag", "lax.conj", "prim:complex", "prim:real", "prim:imag", "prim:conj"),
)  # fmt: skip
op(
    "numpy.angle",
    lambda x, y: bnp.angle(lax.complex(x, y)),
    lambda x, y: np.angle(np.asarray(x) + 1j * np.asarray(y)),
    _pair(vals=uniform(0.3, 2.0)),  # away from the branch cut and the pole at 0
    special=[(np.array([1.0, -1.0, 0.0]), np.array([0.0, 0.5, -2.0]))],
)
op(
    "numpy.iscomplex",
    lambda x, y: bnp.iscomplex(lax.complex(x, bnp.where(x > 0, y, 0.0))),
    lambda x, y: np.iscomplex(np.asarray(x) + 1j * np.where(np.asarray(x) > 0, y, 0.0)),
    _pair(),
    covers=("numpy.isreal",),
    grad=False,
)

# ---- the FFT -------------------------------------------------------------------------------------


def _nonempty(rng):
    return nonempty_shape(rng, 1, 3, 5)


def _matrices(rng):  # the 2-D transforms take two distinct axes
    return nonempty_shape(rng, 2, 3, 5)


_C2C = {  # name -> (blu function of a complex array, numpy reference)
    "fft.fft": (lambda z: bnp.fft.fft(z), np.fft.fft),
    "fft.ifft": (lambda z: bnp.fft.ifft(z, n=3, axis=0, norm="ortho"),
                 lambda z: np.fft.ifft(z, n=3, axis=0, norm="ortho")),
    "fft.fftn": (lambda z: bnp.fft.fftn(z), np.fft.fftn),
    "fft.ifftn": (lambda z: bnp.fft.ifftn(z, norm="forward"),
                  lambda z: np.fft.ifftn(z, norm="forward")),
    "fft.fft2": (lambda z: bnp.fft.fft2(z, axes=(0, -1)), lambda z: np.fft.fft2(z, axes=(0, -1))),
    "fft.ifft2": (lambda z: bnp.fft.ifft2(z, axes=(0, -1)),
                  lambda z: np.fft.ifft2(z, axes=(0, -1))),
    "fft.fftshift": (lambda z: bnp.fft.fftshift(z), np.fft.fftshift),
    "fft.ifftshift": (lambda z: bnp.fft.ifftshift(z, axes=0),
                      lambda z: np.fft.ifftshift(z, axes=0)),
}  # fmt: skip
for _n, (_fn, _ref) in _C2C.items():
    op(_n, _c2c(_fn), _np_c2c(_ref), _pair(_matrices if _n.endswith("2") else _nonempty),
       covers=("lax.fft", "prim:fft") if _n == "fft.fft" else ())  # fmt: skip

_C2R = {  # complex input, real output (the half spectrum of a real signal -> the signal)
    "fft.irfft": (lambda z: bnp.fft.irfft(z, n=4), lambda z: np.fft.irfft(z, n=4)),
    "fft.irfftn": (lambda z: bnp.fft.irfftn(z, s=(3, 5), axes=(0, -1)),
                   lambda z: np.fft.irfftn(z, s=(3, 5), axes=(0, -1))),
    "fft.irfft2": (lambda z: bnp.fft.irfft2(z, s=(2, 3), axes=(0, -1)),
                   lambda z: np.fft.irfft2(z, s=(2, 3), axes=(0, -1))),
    "fft.hfft": (lambda z: bnp.fft.hfft(z, n=5, norm="ortho"),
                 lambda z: np.fft.hfft(z, n=5, norm="ortho")),
}  # fmt: skip
for _n, (_fn, _ref) in _C2R.items():
    op(
        _n,
        lambda x, y, _fn=_fn: _fn(lax.complex(x, y)),
        lambda x, y, _ref=_ref: _ref(np.asarray(x) + 1j * np.asarray(y)),
        _pair(_matrices if _n.endswith("2") else _nonempty),
    )

_R2C = {  # real input, complex output
    "fft.rfft": (lambda x: bnp.fft.rfft(x, n=5), lambda x: np.fft.rfft(x, n=5)),
    "fft.rfftn": (lambda x: bnp.fft.rfftn(x), np.fft.rfftn),
    "fft.rfft2": (lambda x: bnp.fft.rfft2(x, axes=(0, -1), norm="forward"),
                  lambda x: np.fft.rfft2(x, axes=(0, -1), norm="forward")),
    "fft.ihfft": (lambda x: bnp.fft.ihfft(x), np.fft.ihfft),
}  # fmt: skip
for _n, (_fn, _ref) in _R2C.items():
    op(
        _n,
        lambda x, _fn=_fn: _split(_fn(x)),
        lambda x, _ref=_ref: _split(_ref(np.asarray(x))),
        lambda rng, _n=_n: (uniform()(rng, (_matrices if _n.endswith("2") else _nonempty)(rng)),),
    )
