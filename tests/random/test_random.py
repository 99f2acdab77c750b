"""blu.random: Threefry-2x32 against a pure-Python oracle of the Random123 spec, key derivation,
determinism (eager == jit, vmap == loop), input validation, and the statistics of each sampler
on large samples (means/variances within a few standard errors, chi-square tests)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

import blu
import blu.random as random
from blu.core.errors import BluError, BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_jit, check_vmap, loop_vmap

# ---- the oracle: Threefry-2x32-20 written from the spec with Python ints ------------------------

_M32 = 0xFFFFFFFF
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)  # Random123 R_32x2 rotation constants, rounds 0..7


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def threefry2x32_oracle(key: tuple[int, int], ctr: tuple[int, int]) -> tuple[int, int]:
    """20 rounds; a key injection (with its injection counter) after every 4th round."""
    ks = [key[0], key[1], 0x1BD11BDA ^ key[0] ^ key[1]]
    x = [(ctr[0] + ks[0]) & _M32, (ctr[1] + ks[1]) & _M32]
    for rnd in range(20):
        x[0] = (x[0] + x[1]) & _M32
        x[1] = _rotl32(x[1], _ROT[rnd % 8]) ^ x[0]
        if rnd % 4 == 3:
            s = rnd // 4 + 1
            x[0] = (x[0] + ks[s % 3]) & _M32
            x[1] = (x[1] + ks[(s + 1) % 3] + s) & _M32
    return x[0], x[1]


def _u32(*xs: int) -> np.ndarray:
    return np.array(xs, np.uint32)


RANDOM123_VECTORS = [  # (key, counter, expected) from Random123's known-answer tests
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((_M32, _M32), (_M32, _M32), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,ctr,expected", RANDOM123_VECTORS)
def test_threefry_known_answers(key, ctr, expected):
    assert threefry2x32_oracle(key, ctr) == expected
    y0, y1 = random.threefry2x32(_u32(*key), _u32(ctr[0]), _u32(ctr[1]))
    assert (int(np.asarray(y0)[0]), int(np.asarray(y1)[0])) == expected


def test_threefry_matches_oracle_on_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(4):
        key = tuple(int(v) for v in rng.integers(0, 2**32, 2))
        x0, x1 = rng.integers(0, 2**32, (2, 7), dtype=np.uint64).astype(np.uint32)
        y0, y1 = random.threefry2x32(_u32(*key), x0, x1)
        want = [threefry2x32_oracle(key, (int(a), int(b))) for a, b in zip(x0, x1)]
        np.testing.assert_array_equal(np.asarray(y0), [w[0] for w in want])
        np.testing.assert_array_equal(np.asarray(y1), [w[1] for w in want])


def test_same_numbers_as_jax():
    # jax 0.11.2 (threefry "partitionable", its default), run once on the GPU test machine:
    # jax.random.split(PRNGKey(0), 3), fold_in(PRNGKey(0), 12345) and samplers of PRNGKey(42)
    k0, k42 = random.key(0), random.key(42)
    assert np.asarray(random.split(k0, 3)).tolist() == [
        [1797259609, 2579123966], [928981903, 3453687069], [4146024105, 2718843009]]  # fmt: skip
    assert _words(random.fold_in(k0, 12345)) == (908003072, 3252900185)
    assert np.asarray(random.bits(k42, (5,))).tolist() == [
        2098992034, 2919706841, 2646866425, 2409546199, 1935504149]  # fmt: skip
    assert np.asarray(random.bits(k42, (5,), np.uint8)).tolist() == [162, 217, 249, 215, 21]
    uniform = [0.48870956897735596, 0.6797971725463867, 0.6162714958190918,
               0.5610160827636719, 0.4506446123123169]  # fmt: skip
    assert np.asarray(random.uniform(k42, (5,))).tolist() == uniform
    normal = [-0.02830461598932743, 0.4671318531036377, 0.2957029640674591,
              0.15354591608047485, -0.12403281778097153]  # fmt: skip
    np.testing.assert_allclose(np.asarray(random.normal(k42, (5,))), normal, rtol=1e-6)
    assert np.asarray(random.randint(k42, (6,), -5, 17)).tolist() == [7, 7, 4, 14, 10, 12]


# ---- keys and their derivation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed,words",
    [(0, (0, 0)), (42, (0, 42)), (-1, (0, _M32)), (2**31 - 1, (0, 2**31 - 1)),
     (2**40 + 5, (256, 5)), (2**64 - 1, (_M32, _M32)), (-(2**40), (0xFFFFFF00, 0))],
)  # fmt: skip
def test_key_from_python_int(seed, words):
    k = random.key(seed)
    assert k.dtype == np.uint32 and k.shape == (2,)
    assert tuple(int(v) for v in np.asarray(k)) == words


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint8])
def test_key_from_traced_seed_equals_python_seed(dtype):
    for seed in [0, 7, 255]:
        got = blu.jit(random.key)(np.asarray(seed, dtype))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(random.key(seed)))
    got = blu.jit(random.key)(np.asarray(-3, np.int32))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(random.key(-3)))
    got = blu.jit(random.key)(np.asarray(2**40 + 5, np.int64))
    np.testing.assert_array_equal(np.asarray(got), [256, 5])


def _words(k) -> tuple[int, int]:
    a = np.asarray(k)
    return int(a[0]), int(a[1])


def test_split_and_fold_in_follow_the_oracle():
    k = random.key(1234)
    keys = np.asarray(random.split(k, 5))
    assert keys.shape == (5, 2) and keys.dtype == np.uint32
    for i in range(5):
        assert tuple(int(v) for v in keys[i]) == threefry2x32_oracle(_words(k), (0, i))
    assert random.split(k, (2, 3)).shape == (2, 3, 2)
    for d in [0, 1, 2**32 - 1, 12345]:
        assert _words(random.fold_in(k, d)) == threefry2x32_oracle(_words(k), (0, d))
    assert _words(random.fold_in(k, -1)) == _words(random.fold_in(k, 2**32 - 1))
    traced = blu.jit(random.fold_in)(k, np.int32(12345))
    assert _words(traced) == _words(random.fold_in(k, 12345))


def test_derived_keys_are_distinct():
    k = random.key(0)
    keys = {tuple(r) for r in np.asarray(random.split(k, 1000)).tolist()}
    assert len(keys) == 1000 and _words(k) not in keys
    folded = {_words(random.fold_in(k, i)) for i in range(100)}
    assert len(folded) == 100 and _words(k) not in folded
    a, b = np.asarray(random.split(k))
    ua, ub = random.uniform(a, (64,)), random.uniform(b, (64,))
    assert not np.array_equal(np.asarray(ua), np.asarray(ub))
    assert not np.array_equal(np.asarray(ua), np.asarray(random.uniform(k, (64,))))


def test_bits_follow_the_oracle():
    k = random.key(99)
    words = _words(k)
    out = {dt: np.asarray(random.bits(k, (2, 3), dt)) for dt in (np.uint8, np.uint16, np.uint32)}
    b64 = np.asarray(random.bits(k, (2, 3), np.uint64))
    for i in range(6):
        y0, y1 = threefry2x32_oracle(words, (0, i))
        r, c = divmod(i, 3)
        assert out[np.uint32][r, c] == y0 ^ y1
        assert out[np.uint16][r, c] == (y0 ^ y1) & 0xFFFF
        assert out[np.uint8][r, c] == (y0 ^ y1) & 0xFF
        assert b64[r, c] == (y0 << 32) | y1
    for dt in (np.uint8, np.uint16, np.uint32):
        assert out[dt].dtype == dt
    assert random.bits(k, (0, 4)).shape == (0, 4)
    assert random.bits(k).shape == ()


def test_samples_do_not_depend_on_the_shape_layout():
    # element i is a function of (key, i) only: a reshape of a sample is a sample of the shape
    k = random.key(5)
    a = np.asarray(random.uniform(k, (6,)))
    b = np.asarray(random.uniform(k, (2, 3)))
    np.testing.assert_array_equal(a.reshape(2, 3), b)


# ---- determinism: same key -> same numbers; eager == jit; vmap == loop --------------------------

SAMPLERS = {
    "bits": lambda k: random.bits(k, (5,)),
    "bits8": lambda k: random.bits(k, (5,), np.uint8),
    "uniform": lambda k: random.uniform(k, (2, 3)),
    "uniform_bounds": lambda k: random.uniform(k, (4,), minval=-3.0, maxval=np.float32(2.5)),
    "uniform_f64": lambda k: random.uniform(k, (3,), np.float64),
    "uniform_bf16": lambda k: random.uniform(k, (3,), ml_dtypes.bfloat16),
    "normal": lambda k: random.normal(k, (4,)),
    "normal_f16": lambda k: random.normal(k, (4,), np.float16),
    "truncated_normal": lambda k: random.truncated_normal(k, -1.0, 2.0, (4,)),
    "randint": lambda k: random.randint(k, (6,), -5, 17),
    "randint_u8": lambda k: random.randint(k, (6,), 0, 256, np.uint8),
    "bernoulli": lambda k: random.bernoulli(k, 0.4, (16,)),
    "categorical": lambda k: random.categorical(k, np.array([0.5, -1, 1.0]), shape=(12,)),
    "permutation": lambda k: random.permutation(k, 7),
    "permutation_x": lambda k: random.permutation(k, np.arange(12.0).reshape(3, 4), axis=1),
    "choice": lambda k: random.choice(k, 9, (3,), replace=False),
    "split": lambda k: random.split(k, 3),
    "fold_in": lambda k: random.fold_in(k, 17),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_is_deterministic_and_jit_equals_eager(name):
    f = SAMPLERS[name]
    k = random.key(2024)
    a, b = np.asarray(f(k)), np.asarray(f(random.key(2024)))
    np.testing.assert_array_equal(a, b)
    check_jit(f, [k])
    other = np.asarray(f(random.key(2025)))
    assert a.size <= 1 or not np.array_equal(a, other)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_vmaps_over_keys(name):
    keys = np.asarray(random.split(random.key(7), 4))
    check_vmap(SAMPLERS[name], [keys], [0], atol=0, rtol=0)


def test_vmap_over_keys_with_key_axis_not_first():
    keys = np.asarray(random.split(random.key(3), 5)).T  # (2, 5): the batch is axis 1
    check_vmap(lambda k: random.normal(k, (3,)), [keys], [1], atol=0, rtol=0)
    got = blu.vmap(lambda k: random.uniform(k, (2,)), in_axes=1, out_axes=1)(keys)
    want = loop_vmap(lambda k: random.uniform(k, (2,)), [keys], [1], 1)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_vmap_over_fold_in_data_and_seeds():
    k = random.key(11)
    data = np.arange(6, dtype=np.int32)
    got = blu.vmap(lambda d: random.fold_in(k, d))(data)
    for i in range(6):
        assert _words(np.asarray(got)[i]) == _words(random.fold_in(k, i))
    seeds = blu.vmap(random.key)(np.arange(3, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(seeds), [[0, 0], [0, 1], [0, 2]])


@given(st.integers(0, 2**32 - 1), st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_uniform_in_unit_interval_any_shape(seed, shape):
    x = np.asarray(random.uniform(random.key(seed), shape))
    assert x.shape == shape and x.dtype == np.float32
    assert np.all((x >= 0) & (x < 1))
    # built from the top 23 random bits: exact multiples of 2**-23
    np.testing.assert_array_equal(x * 2**23, np.floor(x * 2**23))


# ---- validation ---------------------------------------------------------------------------------


def test_bad_keys_are_rejected_with_their_type():
    with pytest.raises(BluTypeError, match=r"f32\[2\]"):
        random.uniform(np.zeros(2, np.float32), (3,))
    with pytest.raises(BluShapeError, match=r"u32\[3\]"):
        random.normal(np.zeros(3, np.uint32))
    with pytest.raises(BluShapeError, match=r"u32\[4,2\].*vmap"):
        random.split(np.zeros((4, 2), np.uint32))
    with pytest.raises(BluTypeError, match=r"i32\[2\]"):
        random.fold_in(np.zeros(2, np.int32), 1)
    with pytest.raises(BluTypeError):
        random.key(1.5)
    with pytest.raises(BluTypeError):
        random.key(np.zeros(2, np.int32))
    with pytest.raises(BluValueError):
        random.key(2**64)


def test_bad_arguments_are_rejected():
    k = random.key(0)
    with pytest.raises(BluTypeError, match="float"):
        random.uniform(k, (2,), np.int32)
    with pytest.raises(BluTypeError, match="unsigned"):
        random.bits(k, (2,), np.int32)
    with pytest.raises(BluTypeError, match="integer"):
        random.randint(k, (2,), 0, 5, np.float32)
    with pytest.raises(BluShapeError):
        random.uniform(k, (2, 3), minval=np.zeros(4, np.float32))
    with pytest.raises(BluShapeError):
        random.categorical(k, np.zeros((3, 4), np.float32), shape=(2,))
    with pytest.raises(BluValueError):
        random.choice(k, 3, (4,), replace=False)
    with pytest.raises(BluValueError):
        random.permutation(k, -1)
    assert issubclass(BluShapeError, BluError)


# ---- statistics ---------------------------------------------------------------------------------

N = 200_000


def _assert_mean_var(x: np.ndarray, mean: float, var: float, fourth_central: float, z: float = 5):
    """Sample mean and variance within ``z`` standard errors of the true ones."""
    x = np.asarray(x, np.float64)
    n = x.size
    assert abs(x.mean() - mean) < z * math.sqrt(var / n), (x.mean(), mean)
    se_var = math.sqrt((fourth_central - var**2) / n)
    assert abs(x.var() - var) < z * se_var, (x.var(), var)


def _assert_chi2_uniform(counts: np.ndarray, probs: np.ndarray | None = None, p_min: float = 1e-4):
    counts = np.asarray(counts, np.float64)
    probs = np.full(counts.size, 1 / counts.size) if probs is None else probs
    expected = probs * counts.sum()
    stat = ((counts - expected) ** 2 / expected).sum()
    p = stats.chi2.sf(stat, counts.size - 1)
    assert p > p_min, (stat, p)


def test_uniform_statistics():
    x = np.asarray(random.uniform(random.key(1), (N,)))
    assert x.min() >= 0 and x.max() < 1
    _assert_mean_var(x, 0.5, 1 / 12, 1 / 80)
    _assert_chi2_uniform(np.histogram(x, bins=50, range=(0, 1))[0])
    a, b = -2.0, 3.0
    y = np.asarray(random.uniform(random.key(2), (N,), minval=a, maxval=b))
    assert y.min() >= a and y.max() < b
    _assert_mean_var(y, (a + b) / 2, (b - a) ** 2 / 12, (b - a) ** 4 / 80)
    assert stats.kstest(y, stats.uniform(a, b - a).cdf).pvalue > 1e-4


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_uniform_other_dtypes(dtype):
    x = np.asarray(random.uniform(random.key(3), (50_000,), dtype))
    assert x.dtype == dtype
    x = x.astype(np.float64)
    assert x.min() >= 0 and x.max() < 1
    _assert_mean_var(x, 0.5, 1 / 12, 1 / 80)
    nmant = ml_dtypes.finfo(dtype).nmant
    np.testing.assert_array_equal(x * 2**nmant, np.floor(x * 2**nmant))
    if dtype == np.float64:  # uses all 52 mantissa bits
        assert np.any(x * 2**30 != np.floor(x * 2**30))


def test_uniform_never_reaches_maxval_after_rounding():
    # [1, 1 + 2**-20): u * width + 1 rounds to 1 + width for many u in float32
    width = 2.0**-20
    x = np.asarray(random.uniform(random.key(0), (10_000,), minval=1.0, maxval=1.0 + width))
    assert x.min() >= 1.0 and x.max() < 1.0 + width


def test_normal_statistics():
    x = np.asarray(random.normal(random.key(4), (N,)))
    assert np.all(np.isfinite(x))
    _assert_mean_var(x, 0.0, 1.0, 3.0)
    assert stats.kstest(x, stats.norm.cdf).pvalue > 1e-4
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float64):
        y = np.asarray(random.normal(random.key(5), (20_000,), dtype))
        assert y.dtype == dtype and np.all(np.isfinite(y.astype(np.float64)))
        _assert_mean_var(y.astype(np.float64), 0.0, 1.0, 3.0)


@pytest.mark.parametrize("lower,upper", [(-2.0, 2.0), (0.5, 3.0), (-1.0, 0.0)])
def test_truncated_normal_statistics(lower, upper):
    x = np.asarray(random.truncated_normal(random.key(6), lower, upper, (N,)), np.float64)
    assert x.min() >= lower and x.max() <= upper
    ref = stats.truncnorm(lower, upper)
    _assert_mean_var(x, ref.mean(), ref.var(), ref.moment(4) - 4 * ref.mean() * ref.moment(3)
                     + 6 * ref.mean() ** 2 * ref.moment(2) - 3 * ref.mean() ** 4)  # fmt: skip
    assert stats.kstest(x, ref.cdf).pvalue > 1e-4


def test_truncated_normal_array_bounds_broadcast():
    lo = np.array([-1.0, 0.0, 1.0], np.float32)
    x = np.asarray(random.truncated_normal(random.key(7), lo, 2.0, (1000, 3)))
    assert x.shape == (1000, 3)
    assert np.all(x >= lo) and np.all(x <= 2.0)
    assert random.truncated_normal(random.key(7), lo, 2.0).shape == (3,)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_bernoulli_statistics(p):
    x = np.asarray(random.bernoulli(random.key(8), p, (N,)))
    assert x.dtype == np.bool_
    if p in (0.0, 1.0):
        assert np.all(x == bool(p))
    else:
        assert abs(x.mean() - p) < 5 * math.sqrt(p * (1 - p) / N)


def test_bernoulli_array_p():
    p = np.array([0.2, 0.8], np.float32)
    x = np.asarray(random.bernoulli(random.key(9), p, (50_000, 2)), np.float64)
    np.testing.assert_allclose(x.mean(0), p, atol=5 * math.sqrt(0.16 / 50_000))
    assert random.bernoulli(random.key(9), p).shape == (2,)


@pytest.mark.parametrize(
    "lo,hi,dtype", [(0, 10, np.int32), (-7, 6, np.int32), (0, 256, np.uint8), (-3, 3, np.int64),
                    (100, 131, np.int16), (5, 12, np.uint32), (-128, 128, np.int8),
                    (0, 5, np.uint64), (1000, 1300, np.uint16)],
)  # fmt: skip
def test_randint_chi_square(lo, hi, dtype):
    x = np.asarray(random.randint(random.key(10), (N,), lo, hi, dtype))
    assert x.dtype == dtype
    assert x.min() >= lo and x.max() < hi
    _assert_chi2_uniform(np.bincount(x.astype(np.int64) - lo, minlength=hi - lo))


def test_randint_wide_and_degenerate_ranges():
    k = random.key(11)
    info = np.iinfo(np.int32)
    x = np.asarray(random.randint(k, (N,), info.min, info.max), np.float64)
    # uniform over ~2**32 values: mean ~ -0.5, std ~ 2**32 / sqrt(12)
    assert abs(x.mean() + 0.5) < 5 * 2**32 / math.sqrt(12 * N)
    _assert_chi2_uniform(np.histogram(x, bins=64, range=(info.min, info.max))[0])
    np.testing.assert_array_equal(np.asarray(random.randint(k, (5,), 3, 3)), 3)
    np.testing.assert_array_equal(np.asarray(random.randint(k, (5,), 4, 2)), 4)
    y = np.asarray(random.randint(k, (20_000,), -(2**40), 2**40, np.int32))  # clipped bounds
    assert y.min() < -(2**30) and y.max() > 2**30
    z = np.asarray(random.randint(k, (N,), -(2**62), 2**62, np.int64), np.float64)
    _assert_chi2_uniform(np.histogram(z, bins=64, range=(-(2**62), 2**62))[0])
    w = np.asarray(random.randint(k, (N,), 0, 2**64 - 1, np.uint64))
    assert w.dtype == np.uint64
    _assert_chi2_uniform(np.histogram(w.astype(np.float64), bins=64, range=(0.0, 2.0**64))[0])
    b = np.asarray(random.randint(k, (N,), np.int64(-(2**40)), np.int64(2**40), np.int16))
    assert b.dtype == np.int16  # array bounds clipped to the dtype: all int16 values
    counts = np.bincount(b.astype(np.int64) + 2**15, minlength=2**16)
    _assert_chi2_uniform(counts.reshape(256, -1).sum(1))


def test_randint_array_bounds():
    lo = np.array([0, 10, -5], np.int32)
    hi = np.array([2, 20, 5], np.int32)
    x = np.asarray(random.randint(random.key(12), (20_000, 3), lo, hi))
    assert np.all(x >= lo) and np.all(x < hi)
    for j in range(3):
        _assert_chi2_uniform(np.bincount(x[:, j] - lo[j], minlength=hi[j] - lo[j]))


def test_bits_bytes_chi_square():
    b = np.asarray(random.bits(random.key(13), (N // 4,)))
    byte_planes = [(b >> (8 * i)) & 0xFF for i in range(4)]
    for plane in byte_planes:
        _assert_chi2_uniform(np.bincount(plane, minlength=256))
    _assert_chi2_uniform(np.bincount(np.concatenate(byte_planes), minlength=256))
    # each of the 32 bit positions is fair
    ones = np.array([((b >> i) & 1).mean() for i in range(32)])
    assert np.all(np.abs(ones - 0.5) < 5 * math.sqrt(0.25 / b.size))
    b64 = np.asarray(random.bits(random.key(14), (20_000,), np.uint64))
    ones = np.array([((b64 >> np.uint64(i)) & np.uint64(1)).mean() for i in range(64)])
    assert np.all(np.abs(ones - 0.5) < 5 * math.sqrt(0.25 / b64.size))


def _softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def test_categorical_frequencies_match_softmax():
    logits = np.array([1.0, -0.5, 2.0, 0.0, -np.inf, 0.7], np.float32)
    x = np.asarray(random.categorical(random.key(15), logits, shape=(N,)))
    assert x.dtype == np.int32
    counts = np.bincount(x, minlength=6)
    assert counts[4] == 0  # -inf logits are never drawn
    probs = _softmax64(logits.astype(np.float64))
    keep = probs > 0
    _assert_chi2_uniform(counts[keep], probs[keep])


def test_categorical_batch_and_axis():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4)).astype(np.float32)  # categories on axis 0, 4 batches
    x = np.asarray(random.categorical(random.key(16), logits, axis=0, shape=(50_000, 4)))
    assert x.shape == (50_000, 4)
    for j in range(4):
        _assert_chi2_uniform(np.bincount(x[:, j], minlength=3), _softmax64(logits[:, j]))
    assert random.categorical(random.key(16), logits, axis=0).shape == (4,)
    assert random.categorical(random.key(16), logits).shape == (3,)


def test_permutation_is_a_permutation():
    for n in [0, 1, 2, 17, 3000]:  # 3000 needs two sort rounds
        p = np.asarray(random.permutation(random.key(n), n))
        assert p.dtype == np.int32
        np.testing.assert_array_equal(np.sort(p), np.arange(n))
    x = np.arange(20.0).reshape(4, 5)
    y = np.asarray(random.permutation(random.key(1), x, axis=1))
    np.testing.assert_array_equal(np.sort(y, axis=1), x)
    cols = [int(c) for c in y[0]]
    np.testing.assert_array_equal(y, x[:, cols])  # whole columns move together


def test_permutation_is_uniform_over_orders():
    keys = random.split(random.key(17), 12_000)
    perms = np.asarray(blu.vmap(lambda k: random.permutation(k, 3))(keys))
    codes = perms[:, 0] * 9 + perms[:, 1] * 3 + perms[:, 2]
    counts = np.array([np.sum(codes == c) for c in np.unique(codes)])
    assert counts.size == 6
    _assert_chi2_uniform(counts)


def test_choice():
    k = random.key(18)
    x = np.asarray(random.choice(k, 5, (N,)))
    _assert_chi2_uniform(np.bincount(x, minlength=5))
    p = np.array([0.1, 0.0, 0.2, 0.7])
    y = np.asarray(random.choice(k, 4, (N,), p=p))
    counts = np.bincount(y, minlength=4)
    assert counts[1] == 0
    _assert_chi2_uniform(counts[p > 0], p[p > 0])
    z = np.asarray(random.choice(k, 10, (10,), replace=False))
    np.testing.assert_array_equal(np.sort(z), np.arange(10))
    a = np.arange(24.0).reshape(4, 6)
    w = np.asarray(random.choice(k, a, (2, 2), replace=False, axis=1))
    assert w.shape == (4, 2, 2)
    assert len({int(v) for v in w[0].ravel()}) == 4
    np.testing.assert_array_equal(w, a[:, w[0].astype(int)])


@pytest.mark.parametrize("replace", [True, False])
def test_choice_p_must_have_one_entry_per_population_member(replace):
    """A p of another length drew from that many entries (indices past n clamped to the last
    one, or never reached): JAX raises."""
    k = random.key(19)
    for p in (np.array([0.5, 0.5]), np.ones(6) / 6, np.ones((1, 5)) / 5):
        with pytest.raises(BluShapeError, match=r"\(5,\)"):
            random.choice(k, 5, (3,), replace=replace, p=p)
        with pytest.raises(BluShapeError, match=r"\(5,\)"):
            random.choice(k, np.arange(10.0).reshape(2, 5), (3,), replace=replace, p=p, axis=1)


def test_choice_from_no_entries_raises_and_a_0d_array_is_a_count():
    k = random.key(20)
    with pytest.raises(BluValueError, match="population of 0"):
        random.choice(k, 0, (3,))  # gave [0, 0, 0]: entries of an empty population
    with pytest.raises(BluValueError, match="population of 0"):
        random.choice(k, np.zeros((0, 2)), (1,))
    assert random.choice(k, 0, (0,)).shape == (0,)  # no draws: fine, as JAX
    # a 0-d array is the population size, as an int (JAX's rule)
    got = np.asarray(random.choice(k, np.array(5), (N,)))
    assert got.dtype == np.int32
    _assert_chi2_uniform(np.bincount(got, minlength=5))
    np.testing.assert_array_equal(got, np.asarray(random.choice(k, 5, (N,))))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_permutation_independent_shuffles_each_slice(axis):
    """``independent=True`` (JAX's; a raw TypeError before): every 1-D slice along ``axis`` is
    its own uniform permutation of that slice."""
    k = random.key(21)
    rows = 6000
    x = np.tile(np.arange(4), (rows, 1)) if axis else np.tile(np.arange(4), (rows, 1)).T
    got = np.asarray(random.permutation(k, x, axis=axis, independent=True))
    np.testing.assert_array_equal(got, np.asarray(blu.jit(
        lambda key: random.permutation(key, x, axis=axis, independent=True))(k)))  # fmt: skip
    slices = got if axis else got.T
    np.testing.assert_array_equal(np.sort(slices, axis=1), np.tile(np.arange(4), (rows, 1)))
    # all 24 orders of 4 equally likely, slice by slice
    code = slices @ (4 ** np.arange(4))
    _, counts = np.unique(code, return_counts=True)
    assert counts.size == 24
    _assert_chi2_uniform(counts)
    # 1-D input: one permutation, as without independent
    v = np.arange(10)
    np.testing.assert_array_equal(np.asarray(random.permutation(k, v, independent=True)),
                                  np.asarray(random.permutation(k, v)))  # fmt: skip


def test_permutation_of_a_0d_integer_array_is_of_the_count():
    """A 0-d integer array is the count n, as JAX (it raised); a 0-d float is a clear error."""
    for n in [0, 1, 9]:
        for x in [np.int32(n), np.array(n, np.int64), blu.numpy.asarray(n, np.uint8)]:
            got = np.asarray(random.permutation(random.key(5), x))
            want = np.asarray(random.permutation(random.key(5), n))
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.sort(got), np.arange(n))
    with pytest.raises(BluTypeError, match="permutation"):
        random.permutation(random.key(5), np.float32(3.0))
