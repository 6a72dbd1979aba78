"""pytest-torch-distributed: tests of ``torch.distributed`` code on N ranks.

``@pytest.mark.torch_distributed(world_size=2)`` runs a test body on two ranks from a
reused pool; :func:`assert_replicas_in_sync` and :func:`assert_same_across_ranks` check
what data-parallel code gets wrong. Nothing here imports torch.
"""

from typing import TYPE_CHECKING

from pytest_torch.core.exports import lazy_names

if TYPE_CHECKING:
    from pytest_torch.distributed.replicas import (
        assert_replicas_in_sync as assert_replicas_in_sync,
    )
    from pytest_torch.distributed.replicas import (
        assert_same_across_ranks as assert_same_across_ranks,
    )

EXPORTS = {
    "assert_replicas_in_sync": "pytest_torch.distributed.replicas",
    "assert_same_across_ranks": "pytest_torch.distributed.replicas",
}
__all__ = ["assert_replicas_in_sync", "assert_same_across_ranks"]
__getattr__, __dir__ = lazy_names(__name__, EXPORTS)
