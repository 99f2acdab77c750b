"""blu.random against numbers recorded from jax.random (jax/jaxlib 0.10.2 from pip, CPU, default
threefry "partitionable"; the float64 ones with jax_enable_x64). Every sampler whose docstring
claims JAX's bits is here; the recording script is in the docstring of each block.

Integers, bits and keys must be equal; floats from the same bits by the same formula must be
equal in float64 and within an ulp in float32 where blu's transcendental (erf_inv, log) differs
in the last bit from XLA's (normal, truncated_normal, gumbel: documented as "to an ulp").
"""

import numpy as np
import pytest

from blu import random

K42, K7 = random.key(42), random.key(7)


def _ints(x):
    return np.asarray(x).tolist()


# jr.randint(k, shape, lo, hi, dtype=...) with spans above 2**16, where JAX's products wrap in
# the dtype's unsigned width (blu multiplied in uint64 before: other numbers)
RANDINT = [
    (
        K42,
        (8,),
        -(2**30),
        2**30 + 12345,
        np.int32,
        [-95943541, 162627545, -293370697, 54246593, -598162803, -203448981, 290720129, -620320473],
    ),
    (K7, (8,), 0, 2**17 + 3, np.int32, [35809, 69673, 113205, 105728, 98408, 10875, 69241, 7039]),
    (K7, (6,), 0, 100000, np.int32, [76959, 998, 60380, 41453, 59358, 91750]),
    (
        K42,
        (6,),
        -(2**31),
        2**31 - 1,
        np.int32,
        [977810628, 1236381714, -1367112521, -1019495231, -1671904627, -1277190805],
    ),
    (
        K42,
        (6,),
        -(10**15),
        10**15,
        np.int64,
        [
            679464050701877,
            242604979476158,
            -272151055119209,
            106550063542319,
            233100519646113,
            -443313326917694,
        ],
    ),
    (
        K7,
        (6,),
        5,
        2**32 - 7,
        np.uint32,
        [2899676964, 3548401003, 1692160385, 1822441458, 900059363, 2247291755],
    ),
    (K42, (6,), -5, 17, np.int32, [7, 7, 4, 14, 10, 12]),
    # 8- and 16-bit: JAX samples in int32 and casts
    (K42, (8,), 0, 256, np.uint8, [196, 18, 183, 193, 141, 107, 129, 39]),
    (K7, (8,), -30000, 30001, np.int16, [6975, 5261, -15361, -16024, 29682, 4977, 14818, 9672]),
    (K7, (8,), -100, 100, np.int8, [99, -78, 0, -63, -78, -14, -16, 54]),
]


@pytest.mark.parametrize("key,shape,lo,hi,dtype,want", RANDINT)
def test_randint_gives_jax_numbers(key, shape, lo, hi, dtype, want):
    got = random.randint(key, shape, lo, hi, dtype=dtype)
    assert np.asarray(got).dtype == dtype
    assert _ints(got) == want


def test_bits_keys_and_integer_samplers_give_jax_numbers():
    assert _ints(random.bits(K42, (3,), np.uint64)) == [
        7871734211187709741,
        276886910877598708,
        10591095138341673235,
    ]
    assert _ints(random.bits(K7, (4,), np.uint16)) == [10507, 32256, 10666, 17712]
    assert _ints(random.split(K7, 2)) == [[3625411723, 1954958720], [195045567, 4062205631]]
    assert _ints(random.fold_in(K7, 99)) == [1174506596, 231747863]
    assert _ints(random.permutation(K7, 10)) == [9, 4, 2, 3, 5, 0, 7, 6, 1, 8]
    assert _ints(random.choice(K7, 10, (5,), replace=False)) == [9, 4, 2, 3, 5]
    assert _ints(random.choice(K7, 10, (5,))) == [9, 2, 0, 7, 2]
    assert _ints(random.bernoulli(K7, 0.3, (8,))) == [False] * 8
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    assert _ints(random.categorical(K7, logits, shape=(8,))) == [1, 3, 3, 2, 3, 0, 2, 2]


def test_float_samplers_give_jax_numbers():
    assert _ints(random.uniform(K7, (4,), np.float64)) == [
        0.8441069450823528,
        0.04541258512665647,
        0.22498462569285382,
        0.06438560513366842,
    ]
    assert _ints(random.uniform(K7, (4,))) == [
        0.6740899085998535,
        0.9746168851852417,
        0.3028435707092285,
        0.4439585208892822,
    ]
    assert _ints(random.uniform(K7, (4,), np.float32, -3.0, 5.0)) == [
        2.392719268798828,
        4.796935081481934,
        -0.5772514343261719,
        0.5516681671142578,
    ]
    one_ulp = 2 * np.finfo(np.float32).eps  # relative: erf_inv/log may differ in the last bit
    np.testing.assert_allclose(
        np.asarray(random.normal(K7, (4,), np.float32)),
        [0.4512351453304291, 1.9534509181976318, -0.5162394642829895, -0.14094029366970062],
        rtol=one_ulp,
    )
    np.testing.assert_allclose(
        np.asarray(random.truncated_normal(K7, -1.0, 2.0, (4,), np.float32)),
        [0.5547337532043457, 1.711128830909729, -0.23639945685863495, 0.055367838591337204],
        rtol=one_ulp,
    )
    np.testing.assert_allclose(
        np.asarray(random.gumbel(K7, (4,), np.float32)),
        [0.9304105043411255, 3.6608431339263916, -0.17776018381118774, 0.20822525024414062],
        rtol=4 * one_ulp,
    )
