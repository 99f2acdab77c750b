"""Test configuration: hypothesis profiles ('ci' small and deterministic, 'dev' larger) and
the temporary kernel cache every test compiles into."""

import importlib.abc
import importlib.machinery
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

TESTS = os.path.dirname(os.path.abspath(__file__))


class _SharedHelpers(importlib.abc.MetaPathFinder):
    """The shared helpers stay at tests/ (``helpers.py``, ``gpu_helpers.py``, ``opinfo.py``,
    ``simt_sim.py``, ``ops/``) while the tests live in folders that mirror blu's packages. They
    import as ``tests.helpers`` (tests/ is a package) and also by their bare names (``from
    helpers import ...``), found here in tests/ when nothing installed has the name. tests/ itself
    is not put on ``sys.path``: its folders ``numpy``, ``random``, ``cuda`` would shadow those."""

    NAMES = frozenset({"helpers", "gpu_helpers", "opinfo", "simt_sim", "ops"})

    def find_spec(self, name, path=None, target=None):
        if path is None and name in self.NAMES:
            return importlib.machinery.PathFinder.find_spec(name, [TESTS])
        return None


if not any(type(f).__name__ == "_SharedHelpers" for f in sys.meta_path):  # conftest once
    sys.meta_path.append(_SharedHelpers())

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


@pytest.fixture(scope="session", autouse=True)
def kernel_cache_dir(tmp_path_factory):
    """Every test compiles into a temporary kernel cache, never the user's (``BLU_CACHE_DIR`` /
    ``blu.config.cache_dir``), its CPU entries signed with a temporary key
    (``BLU_CACHE_KEY_FILE``). ``BLU_TEST_CACHE_DIR`` names the cache to use instead (with the
    user's key): the GPU machine reads its carried cache (``scripts/gpu_check.sh``) and
    ``scripts/fill_gpu_cache.py`` fills one by running the GPU tests."""
    import blu

    d = os.environ.get("BLU_TEST_CACHE_DIR") or str(tmp_path_factory.mktemp("blu-cache"))
    mp = pytest.MonkeyPatch()
    mp.setenv("BLU_CACHE_DIR", d)
    old = blu.config.cache_dir, blu.config.cache_key_file
    blu.config.update("cache_dir", d)
    if not os.environ.get("BLU_TEST_CACHE_DIR"):  # a carried cache keeps the user's own key
        key = str(tmp_path_factory.mktemp("blu-key") / "cache-key")
        mp.setenv("BLU_CACHE_KEY_FILE", key)
        blu.config.update("cache_key_file", key)
    try:
        yield d
    finally:
        blu.config.update("cache_dir", old[0])
        blu.config.update("cache_key_file", old[1])
        mp.undo()


@pytest.fixture(autouse=True)
def _restore_config():
    """Flags a test changes (``set_flag``, ``helpers.env_flag``) never leak into the next test."""
    from blu.core.config import config

    old = config.values()
    yield
    for name, value in old.items():
        if config.values().get(name) != value:
            config.update(name, value)
