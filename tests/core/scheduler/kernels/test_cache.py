"""The compiled kernels' disk cache follows the helpers they inline (see kernels/scalars.py)."""

import hashlib
from pathlib import Path
from types import ModuleType

import pytest

from collapipe_core.scheduler.kernels import bandwidth, costs, links, microbatches, priced, scalars, segments

# (kernel file, the file whose jit helpers it compiles in): the first carries the second's digest
INLINED = [
    (bandwidth, scalars),
    (segments, scalars),
    (microbatches, scalars),
    (microbatches, costs),
    (costs, scalars),
    (links, scalars),
    (links, bandwidth),
    (priced, scalars),
]


@pytest.mark.parametrize(
    ("module", "helpers"), INLINED, ids=[f"{m.__name__[38:]}-{h.__name__[38:]}" for m, h in INLINED]
)
def test_kernel_files_carry_the_digest_of_the_helpers_they_inline(
    module: ModuleType, helpers: ModuleType
) -> None:
    name = Path(str(helpers.__file__)).stem
    constant = f"{name.upper()}_SHA256"
    digest = hashlib.sha256(Path(str(helpers.__file__)).read_bytes()).hexdigest()[:16]
    assert digest == getattr(module, constant), (
        f"{name}.py changed: set {constant} = {digest!r} in {Path(str(module.__file__)).name}, "
        "so that numba recompiles the kernels that inline it"
    )
