"""Test configuration: hypothesis profiles ('ci' small and deterministic, 'dev' larger)."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,  # CI replays nothing from earlier runs: the same examples every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def set_flag():
    """``set_flag(name, value)``: ``blu.config.update`` for one test; every flag is restored
    afterwards (flags are read from the environment once, at import, so tests set them here)."""
    from blu.core.config import config

    old = config.values()
    yield config.update
    for name, value in old.items():
        config.update(name, value)
