"""Control flow primitives holding sub-jaxprs (to be written)."""

__all__: list[str] = []
