"""Examples built on blu (run from the repository root, e.g. ``python -m examples.gpt2``)."""
