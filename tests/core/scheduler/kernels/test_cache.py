"""The compiled kernels' disk cache follows the helpers they inline (see kernels/scalars.py)."""

import hashlib
from pathlib import Path
from types import ModuleType

import pytest

from collapipe_core.scheduler.kernels import bandwidth, microbatches, scalars, segments


@pytest.mark.parametrize(
    "module", [bandwidth, segments, microbatches], ids=["bandwidth", "segments", "microbatches"]
)
def test_kernel_files_carry_the_digest_of_the_helpers_they_inline(module: ModuleType) -> None:
    digest = hashlib.sha256(Path(scalars.__file__).read_bytes()).hexdigest()[:16]
    assert digest == module.SCALARS_SHA256, (
        f"scalars.py changed: set SCALARS_SHA256 = {digest!r} in {Path(str(module.__file__)).name}, "
        "so that numba recompiles the kernels that inline it"
    )
