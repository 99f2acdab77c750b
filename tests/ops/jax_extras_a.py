"""OpInfo entries of the JAX-surface names added in session 10 (part a)."""

from __future__ import annotations
