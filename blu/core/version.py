"""blu's version (in the core so every layer can read it; ``blu.__version__`` re-exports it)."""

__version__ = "0.1.0"
