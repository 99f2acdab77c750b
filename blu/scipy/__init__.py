"""blu.scipy: SciPy's API on blu arrays, as ``jax.scipy`` (``special``, ``stats``,
``linalg`` and ``signal``; what is missing is listed in ``docs/coming_from_jax.md``)."""

from blu.scipy import linalg, signal, special, stats

__all__ = ["linalg", "signal", "special", "stats"]
