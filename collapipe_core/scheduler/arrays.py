"""Array helpers the solver steps share: batched gathers, dataclasses of arrays, silenced IEEE warnings.

The round's problem and its closed form live in the cost model
(:mod:`collapipe_core.costmodel.problem`, :mod:`collapipe_core.costmodel.closed_form`): every scheduler
minimises exactly what :func:`collapipe_core.costmodel.evaluate` reports.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

IntArray = npt.NDArray[np.int64]
_T = TypeVar("_T", bound=np.generic)
_D = TypeVar("_D", bound="DataclassInstance")

quiet = np.errstate(divide="ignore", invalid="ignore", over="ignore")
"""A decorator for the solver steps: they mark infeasible candidates with ∞ (and 0·∞ = NaN along the way)
and mask them explicitly, so IEEE warnings are silenced there."""


def take_last(values: npt.NDArray[_T], index: IntArray) -> npt.NDArray[_T]:
    """``np.take_along_axis(values, index, axis=-1)`` for ``values`` (..., K) broadcast to the leading shape
    of ``index`` (..., J), as one flat gather (numpy's version builds an index per axis, and broadcasting
    ``values`` costs more than the gather: slow on the solvers' many small arrays). The offsets of
    ``values``' rows broadcast against ``index``."""
    lead, width = values.shape[:-1], values.shape[-1]
    offsets = np.arange(0, math.prod(lead) * width, width).reshape((*lead, 1))
    out: npt.NDArray[_T] = values.reshape(-1)[index + offsets]
    return out


def indexed(arrays: _D, index: Any) -> _D:
    """A dataclass of arrays with every field indexed by ``index`` (rows, a mask, new axes); None stays."""
    values = {f.name: getattr(arrays, f.name) for f in dataclasses.fields(arrays)}
    return dataclasses.replace(arrays, **{k: v if v is None else v[index] for k, v in values.items()})


def joined(parts: list[_D]) -> _D:
    """Dataclasses of arrays joined field by field along the first axis."""
    fields = dataclasses.fields(parts[0])
    return dataclasses.replace(
        parts[0], **{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields}
    )
