"""blu.scipy: SciPy's API on blu arrays, as ``jax.scipy`` (its modules below; what is missing
is listed in ``docs/coming_from_jax.md``)."""

from blu.scipy import fft, integrate, linalg, ndimage, signal, special, stats

__all__ = ["fft", "integrate", "linalg", "ndimage", "signal", "special", "stats"]
