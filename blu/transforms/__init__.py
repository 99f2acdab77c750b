"""Transformations of jaxprs: ad (jvp/grad), batching (vmap), jit, partial evaluation."""
