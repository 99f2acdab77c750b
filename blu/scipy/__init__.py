"""blu.scipy: SciPy's API on blu arrays, as ``jax.scipy`` (``special``, ``stats`` and
``linalg``; what is missing is listed in ``docs/coming_from_jax.md``)."""

from blu.scipy import linalg, special, stats

__all__ = ["linalg", "special", "stats"]
