"""jit's static-argument options checked at ``jit`` time with a ``BluError`` naming them: a
negative ``static_argnums`` of a ``*args`` function (it raised a raw IndexError, or, with
positional parameters before ``*args``, silently made the first one static), and
``static_argnums`` / ``static_argnames`` of the wrong type (raw TypeErrors); ``eval_shape``
takes ``ShapeDtypeStruct``s as keyword arguments too (as positional ones); ``donate_argnames``
(JAX's; it raised a raw TypeError) resolved against the signature with ``donate_argnums``."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError, BluValueError


@pytest.mark.parametrize("fun", [lambda *a: a[0] * a[1], lambda x, *r: x * r[-1]])
def test_negative_static_argnums_of_a_varargs_function_is_an_error(fun):
    with pytest.raises(BluValueError, match=r"negative static_argnums \[-1\]"):
        blu.jit(fun, static_argnums=-1)


def test_positive_static_argnums_of_a_varargs_function():
    seen = []

    def f(x, *r):
        seen.append(type(r[0]))
        return x * r[0]

    assert float(blu.jit(f, static_argnums=1)(2.0, 3)) == 6.0
    assert seen == [int]  # the static argument reached the function as the Python value


@pytest.mark.parametrize(
    "kw",
    [{"static_argnums": "x"}, {"static_argnums": 1.0}, {"static_argnames": 1},
     {"static_argnums": (0, True)}],
)  # fmt: skip
def test_option_of_the_wrong_type_is_an_error(kw):
    with pytest.raises(BluTypeError, match="must be an? (int|str)"):
        blu.jit(lambda a, x=1: a * x, **kw)


@pytest.mark.parametrize("nums", [0, np.int64(0), [0], (0,)])
def test_static_argnums_spellings(nums):
    j = blu.jit(lambda n, x: x * n, static_argnums=nums)
    assert j.static_argnums == frozenset({0})
    assert float(j(3, 2.0)) == 6.0


@pytest.mark.parametrize(
    "nums", [range(2), {0, 1}, (i for i in (0, 1)), np.array([0, 1]), [-3, -2], range(-3, -1)]
)
def test_static_argnums_any_iterable_of_positions(nums):
    # JAX's _ensure_index_tuple takes any iterable of ints; a range or a set was refused
    seen = []

    def f(n, m, x):
        seen.append((type(n), type(m)))
        return x * n + m

    j = blu.jit(f, static_argnums=nums)
    assert j.static_argnums == frozenset({0, 1})
    assert float(j(3, 4, 2.0)) == 3 * 2.0 + 4
    assert seen == [(int, int)]  # both reached the function as Python values


@pytest.mark.parametrize(
    ("names", "want"),
    [("n", {"n"}), (["n"], {"n"}), ({"n", "m"}, {"n", "m"}), ((s for s in ("m",)), {"m"})],
)
def test_static_argnames_a_str_or_any_iterable_of_them(names, want):
    # JAX's _ensure_str_tuple; a set or a generator of names was refused
    seen = []

    def f(x, n=1, m=0):
        seen.append((type(n), type(m)))
        return x * n + m

    j = blu.jit(f, static_argnames=names)
    assert j.static_argnames == frozenset(want)
    assert float(j(2.0, n=3, m=1)) == 7.0
    # the static ones reached the function as Python ints, the others as tracers
    assert [t is int for t in seen[0]] == [name in want for name in ("n", "m")]


def test_eval_shape_takes_specs_as_keyword_arguments():
    spec = blu.ShapeDtypeStruct((2, 3), np.float64)
    out = blu.eval_shape(lambda a, *, k: a @ k.T, spec, k=spec)
    assert (out.shape, out.dtype) == ((2, 2), np.float64)


def _axpy(a, x, *, y):
    return a * x + y


def _inputs():
    rng = np.random.default_rng(0)
    a64, x64, y64 = (rng.standard_normal(64) for _ in range(3))
    arrays = [bnp.asarray(v.astype(np.float32)) for v in (a64, x64, y64)]
    return arrays, a64 * x64 + y64


@pytest.mark.parametrize("x_by_keyword", [False, True])
def test_donate_argnames_donates_the_named_arguments(x_by_keyword):
    """A named argument is donated whether passed by position or by keyword (its position is
    inferred from the signature, as JAX's): deleted by the call, its buffer reused for the
    output; the others are kept."""
    f = blu.jit(_axpy, donate_argnames=("x", "y"))
    assert f.donate_argnums == frozenset({1}) and f.donate_argnames == frozenset({"x", "y"})
    (a, x, y), want = _inputs()
    addrs = {x._buf.ctypes.data, y._buf.ctypes.data}
    out = f(a, x=x, y=y) if x_by_keyword else f(a, x, y=y)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
    assert x.is_deleted() and y.is_deleted() and not a.is_deleted()
    assert out._buf.ctypes.data in addrs  # written in place of a donated argument
    with pytest.raises(BluValueError, match="Array has been deleted.*donated to jit"):
        np.asarray(x)


def test_donate_argnums_donates_its_parameter_passed_by_keyword():
    f = blu.jit(_axpy, donate_argnums=0)
    assert f.donate_argnames == frozenset({"a"})
    (a, x, y), want = _inputs()
    np.testing.assert_allclose(np.asarray(f(a=a, x=x, y=y)), want, rtol=1e-5, atol=1e-5)
    assert a.is_deleted() and not x.is_deleted() and not y.is_deleted()


def test_donate_argnums_and_argnames_together_apply_each_to_its_own_way():
    """Given both, nothing is inferred (JAX's rule): position 0 is donated when passed by
    position, ``x`` when passed by keyword."""
    f = blu.jit(_axpy, donate_argnums=0, donate_argnames="x")
    (a, x, y), want = _inputs()
    np.testing.assert_allclose(np.asarray(f(a, x, y=y)), want, rtol=1e-5, atol=1e-5)
    assert a.is_deleted() and not x.is_deleted() and not y.is_deleted()
    (a, x, y), want = _inputs()
    np.testing.assert_allclose(np.asarray(f(a=a, x=x, y=y)), want, rtol=1e-5, atol=1e-5)
    assert x.is_deleted() and not a.is_deleted() and not y.is_deleted()


def test_donate_argnames_of_a_kwargs_function():
    f = blu.jit(lambda **kw: kw["p"] * 2.0 + kw["q"], donate_argnames="p")
    p, q = bnp.asarray(np.arange(4.0)), bnp.asarray(np.ones(4))
    assert np.asarray(f(p=p, q=q)).tolist() == [1.0, 3.0, 5.0, 7.0]
    assert p.is_deleted() and not q.is_deleted()


def _pos_only(a, /, b):
    return a + b


@pytest.mark.parametrize(
    "fun, kw, err, match",
    [
        (_axpy, {"donate_argnames": "z"}, BluValueError, r"donate_argnames \['z'\] are not par"),
        (_pos_only, {"donate_argnames": "a"}, BluValueError, "positional-only"),
        (_axpy, {"donate_argnames": "y", "static_argnames": "y"}, BluValueError,
         "both static and donated"),
        (_axpy, {"donate_argnames": "x", "static_argnums": 1}, BluValueError,
         "both static and donated"),
        (_axpy, {"donate_argnames": 1}, BluTypeError, "donate_argnames must be a str"),
    ],
)  # fmt: skip
def test_bad_donate_argnames_are_refused_at_jit_time(fun, kw, err, match):
    with pytest.raises(err, match=match):
        blu.jit(fun, **kw)


@pytest.mark.parametrize("nums", [range(2), np.array([0, 1]), np.array(1), [np.int64(1)]])
def test_donate_argnums_takes_any_sequence_of_positions(nums):
    # JAX's index tuple; a range (taken before) and numpy arrays were refused as 'not ints'
    want = {int(i) for i in np.atleast_1d(np.asarray(nums))}
    f = blu.jit(lambda a, b: a + 2.0 * b, donate_argnums=nums)
    assert f.donate_argnums == frozenset(want)
    x, y = bnp.ones(3), bnp.ones(3)
    np.testing.assert_allclose(np.asarray(f(x, y)), np.full(3, 3.0))
    for i, a in enumerate((x, y)):
        if i in want:
            with pytest.raises(BluValueError, match="deleted"):
                np.asarray(a)
        else:
            np.testing.assert_allclose(np.asarray(a), np.ones(3))
