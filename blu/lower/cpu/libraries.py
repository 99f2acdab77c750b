"""The linear-algebra primitives and the FFT on the CPU as library nodes (``NodeKind.LIBRARY``)
writing into the plan's buffers, rather than host fallbacks (issue #34).

- ``cholesky``, ``triangular_solve``, ``lu``, ``qr``, ``eigh``, ``svd``, ``geqrf``,
  ``householder_product``: LAPACK/BLAS through numpy.linalg and scipy.linalg
  (``blu.core.lapack``, the primitives' impls: batched, NaN for a failed factorization,
  float16/bfloat16 in float32). LAPACK's wrappers allocate their results, so each is copied
  once into its planned output buffer.
- ``fft``: numpy's pocketfft, which writes straight into the planned output (numpy >= 2's
  ``out=``), single precision staying single.
- ``conv_general_dilated``: the direct convolution of ``blu/lax/conv_numpy.py`` (one padded
  copy of the input, a BLAS product per kernel offset into the planned output), not the
  im2col decomposition the CUDA targets inline (a copy of the input per kernel offset).

The operands are the plan's contiguous buffers (on the CPU a library call is never fed a strided
view, ``Capabilities.views_feed_libraries``); no workspace is planned (the libraries keep their
own). The CUDA targets' counterparts are cuSOLVER and cuFFT (``blu/lower/cuda/libraries.py``).
"""

from __future__ import annotations

import numpy as np

from blu.lax.conv_numpy import conv_numpy
from blu.lax.convolution import conv_general_dilated_p
from blu.lax.fft import fft_p
from blu.lax.linalg.householder import geqrf_p, householder_product_p
from blu.lax.linalg.primitives import cholesky_p, eigh_p, lu_p, qr_p, svd_p, triangular_solve_p
from blu.lower.library import LibraryLowering, impl_into, register_library

_FFTS = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}


def _fft(ins, outs, workspace, *, fft_type: str, fft_lengths: tuple[int, ...]) -> None:
    """``fft_p`` into its planned output: pocketfft's ``out=`` on the trailing axes."""
    (x,), (out,) = ins, outs
    if out.size == 0:
        return
    if x.size == 0:  # a zero-length transformed axis: pocketfft rejects it (the impl's zeros)
        out[...] = 0
        return
    axes = tuple(range(x.ndim - len(fft_lengths), x.ndim))
    _FFTS[fft_type](x, s=fft_lengths, axes=axes, out=out)


def _conv(ins, outs, workspace, **params) -> None:
    """``conv_general_dilated_p`` accumulated straight into its planned output."""
    conv_numpy(*ins, out=outs[0], **params)


def _none(avals, params, target: str) -> int:
    return 0  # the libraries keep their own work areas


_LINALG = (cholesky_p, triangular_solve_p, lu_p, qr_p, eigh_p, svd_p, geqrf_p,
           householder_product_p)  # fmt: skip
for _p in _LINALG:
    register_library(_p, LibraryLowering(workspace=_none, cpu=impl_into(_p), gpu=None),
                     platform="cpu")  # fmt: skip
register_library(fft_p, LibraryLowering(workspace=_none, cpu=_fft, gpu=None), platform="cpu")
register_library(conv_general_dilated_p, LibraryLowering(workspace=_none, cpu=_conv, gpu=None),
                 platform="cpu")  # fmt: skip
