"""blu.scipy: SciPy's API on blu arrays, as ``jax.scipy`` (``special`` for now; ``linalg`` and
``stats`` are listed in ``docs/coming_from_jax.md``)."""

from blu.scipy import special

__all__ = ["special"]
