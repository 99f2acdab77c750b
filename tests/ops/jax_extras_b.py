"""OpInfo entries of the JAX-surface names added in session 10 (part b)."""

from __future__ import annotations
