"""blu's core: dtypes, avals, primitives, interpreters and tracing, jaxprs, pytrees, arrays."""
