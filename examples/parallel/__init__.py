"""Parallel examples: data-parallel GPT-2 (with ZeRO-1) and a tensor-parallel MLP."""
