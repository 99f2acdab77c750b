"""blu.scipy: SciPy's API on blu arrays, as ``jax.scipy`` (``special`` and ``stats``; ``linalg``
is listed in ``docs/coming_from_jax.md``)."""

from blu.scipy import special, stats

__all__ = ["special", "stats"]
