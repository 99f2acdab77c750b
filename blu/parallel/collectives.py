"""The collectives, defined in ``blu.lax.parallel`` (lax must not import parallel); kept here so
``blu.parallel.collectives`` imports keep working."""

from blu.lax.parallel import (  # noqa: F401
    all_gather,
    all_gather_p,
    all_to_all,
    all_to_all_p,
    axis_index,
    axis_index_p,
    pmax,
    pmax_p,
    pmean,
    pmin,
    pmin_p,
    ppermute,
    ppermute_p,
    psum,
    psum_p,
    psum_scatter,
    pvary,
    pvary_p,
    reduce_scatter_p,
)

__all__ = [
    "psum",
    "pmean",
    "pmax",
    "pmin",
    "all_gather",
    "psum_scatter",
    "ppermute",
    "all_to_all",
    "axis_index",
    "pvary",
]
