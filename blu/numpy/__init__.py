"""blu.numpy: the NumPy API on blu arrays and tracers (``import blu.numpy as bnp``).

Every function is a composition of ``blu.lax`` primitives, so it runs eagerly, stages under
``jit``, differentiates and batches. Semantics are numpy's, with JAX's deviations: Python
floats/ints (and lists of them) become float32/int32 and are *weakly typed* (they take the
other operand's dtype), promotion follows JAX's lattice (``result_type``), arrays are immutable
(``x.at[idx].set(v)`` instead of ``x[idx] = v``), and out-of-bounds integer-array indices are
clamped.

Modules: ``creation``, ``ufuncs`` (elementwise arithmetic), ``transcendental`` (exp, log,
trigonometric), ``manipulation`` (shapes), ``selection`` (take, where), ``reductions``,
``products`` (matmul, dot, tensordot), ``einsum``, ``sorting``, ``indexing`` (getitem and
``.at[]``), ``linalg``, ``ufunc_api`` (``bnp.add``, ``bnp.sin``... as ``ufunc`` objects with
``reduce``, ``accumulate``, ``outer``, ``at``; ``frompyfunc``).
"""

import math as _math
import sys as _sys

from blu.core import array as _array

# The submodules form a DAG (none imports this package; each imports only modules below it),
# from the bottom: _promote (array, promotion, broadcasting), _dtypes, devices, logic,
# complexes, ufuncs (arithmetic, rounding, extrema, the three-argument where), transcendental,
# manipulation, creation, selection (take, nonzero, where), reductions, sorting, sets,
# products, einsum, indexing, index_update, signal, fft, standard, linalg, statistics, extras,
# index_tricks, index_grids, host_io, nanfuncs, padding, editing, windows, polynomial,
# differences, building, ufunc_api (the ufunc objects bnp.add, bnp.sin... over those modules'
# functions).
from blu.numpy import fft, linalg
from blu.numpy._dtypes import (
    bfloat16,
    bool_,
    can_cast,
    cdouble,
    complex64,
    complex128,
    complex_,
    complexfloating,
    csingle,
    double,
    dtype,
    finfo,
    float16,
    float32,
    float64,
    float_,
    floating,
    generic,
    iinfo,
    inexact,
    int_,
    int8,
    int16,
    int32,
    int64,
    integer,
    issubdtype,
    ndarray,
    number,
    promote_types,
    result_type,
    single,
    signedinteger,
    uint,
    uint8,
    uint16,
    uint32,
    uint64,
    unsignedinteger,
)
from blu.numpy._promote import asarray_operand, broadcast_shapes, promote_args
from blu.numpy.creation import *  # noqa: F403
from blu.numpy import devices as _devices
from blu.numpy.devices import __array_namespace_info__, from_dlpack
from blu.numpy.editing import *  # noqa: F403
from blu.numpy.einsum import einsum, einsum_path
from blu.numpy.index_update import IndexUpdateHelper, IndexUpdateRef
from blu.numpy.indexing import getitem
from blu.numpy.logic import *  # noqa: F403
from blu.numpy.manipulation import *  # noqa: F403
from blu.numpy.padding import *  # noqa: F403
from blu.numpy.products import *  # noqa: F403
from blu.numpy.reductions import *  # noqa: F403
from blu.numpy.repetition import *  # noqa: F403
from blu.numpy.selection import *  # noqa: F403
from blu.numpy.sets import *  # noqa: F403
from blu.numpy.sorting import *  # noqa: F403
from blu.numpy.signal import convolve, correlate
from blu.numpy.ufuncs import *  # noqa: F403
from blu.numpy.transcendental import *  # noqa: F403
from blu.numpy.complexes import *  # noqa: F403
from blu.numpy.standard import *  # noqa: F403
from blu.numpy.standard import __array_api_version__
from blu.numpy.statistics import *  # noqa: F403
from blu.numpy.extras import *  # noqa: F403
from blu.numpy.index_tricks import *  # noqa: F403
from blu.numpy.index_grids import *  # noqa: F403
from blu.numpy.host_io import *  # noqa: F403
from blu.numpy.nanfuncs import *  # noqa: F403
from blu.numpy.windows import *  # noqa: F403
from blu.numpy.polynomial import *  # noqa: F403
from blu.numpy.differences import *  # noqa: F403
from blu.numpy.building import *  # noqa: F403
from blu.numpy.ufunc_api import *  # noqa: F403  (last: bnp.add... are ufunc objects)

pi = _math.pi
e = _math.e
inf = float("inf")
nan = float("nan")
euler_gamma = 0.5772156649015329
newaxis = None
bool = bool_  # noqa: A001  (numpy 2 spells it bnp.bool as well)

# x.__array_namespace__() is this package
_devices.register_namespace(_sys.modules[__name__])
# the numpy-style methods of arrays and tracers (x + y, x.sum(), x.at[...]) call these
# (a ufunc's own function: x + y calls blu.numpy.ufuncs.add, as before bnp.add was a ufunc)
_array.register_array_functions(
    {
        _n: _f._func if isinstance(_f, ufunc) else _f  # noqa: F405
        for _n in _array.ARRAY_FUNCTIONS
        for _f in [globals().get(_n) or getattr(_devices, _n)]
    }
)
