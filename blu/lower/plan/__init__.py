"""Launch plans: a jaxpr simplified, its products canonicalized, partitioned into nodes
(``NodeKind``), its kernels laid out and its buffers planned. Pure Python: no MLIR, no device."""
