"""blu's errors (``jax.errors``' counterpart): every error blu raises is a ``BluError``.

``BluTypeError``, ``BluValueError``, ``BluShapeError``, ``BluIndexError`` and ``BluAxisError``
also subclass Python's ``TypeError`` / ``ValueError`` / ``IndexError``; ``ConcretizationError``
(a tracer where a concrete value is needed; JAX's ``ConcretizationTypeError`` and
``TracerBoolConversionError``...), ``EscapedTracerError`` (JAX's ``UnexpectedTracerError``),
``BluOutOfMemoryError`` (an allocation failed; names the buffer and the device's memory) and
``LinAlgError`` (numpy's, for singular matrices).
"""

from blu.core.errors import (
    BluAxisError,
    BluError,
    BluIndexError,
    BluOutOfMemoryError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    ConcretizationError,
    EscapedTracerError,
    LinAlgError,
)

# JAX's names for the same errors
ConcretizationTypeError = ConcretizationError
TracerBoolConversionError = ConcretizationError
TracerIntegerConversionError = ConcretizationError
TracerArrayConversionError = ConcretizationError
UnexpectedTracerError = EscapedTracerError
JaxRuntimeError = BluError

__all__ = [
    "BluAxisError",
    "BluError",
    "BluIndexError",
    "BluOutOfMemoryError",
    "BluShapeError",
    "BluTypeError",
    "BluValueError",
    "ConcretizationError",
    "ConcretizationTypeError",
    "EscapedTracerError",
    "JaxRuntimeError",
    "LinAlgError",
    "TracerArrayConversionError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
    "UnexpectedTracerError",
]
