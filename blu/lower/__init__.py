"""From jaxprs to executables (simplification, fusion, memory planning, MLIR lowering)."""
