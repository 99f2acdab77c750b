"""The OpInfo table (``tests/ops/``): one entry per public operation of blu, driving the
generic tests of ``tests/transforms/test_opinfo.py``. See ``tests/ops/base.py`` for the entry
format."""

from ops import NOT_OPERATIONS, TABLE, OpInfo, covered, public_names  # noqa: F401
