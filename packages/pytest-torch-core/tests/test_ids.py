from types import SimpleNamespace

import pytest

from pytest_torch.core.ids import plain_nodeid


def xdist_group(*args: str, **kwargs: str) -> SimpleNamespace:
    """``@pytest.mark.xdist_group(...)`` as the item holds it (xdist need not be here)."""
    return SimpleNamespace(name="xdist_group", args=args, kwargs=kwargs)


class Grouped:
    """An item as an xdist worker under ``--dist loadgroup`` sees it."""

    def __init__(self, nodeid: str, *marks: SimpleNamespace) -> None:
        self.nodeid = nodeid
        self.marks = marks

    def iter_markers(self, name: str):
        return [mark for mark in self.marks if mark.name == name]


@pytest.mark.parametrize(
    ("nodeid", "marks", "expected"),
    [
        ("t.py::test_a@gpu", [xdist_group("gpu")], "t.py::test_a"),
        ("t.py::test_a@gpu", [xdist_group(name="gpu")], "t.py::test_a"),
        # every group of the test, sorted and joined, as xdist writes them
        ("t.py::test_a@a_b", [xdist_group("b"), xdist_group("a")], "t.py::test_a"),
        # a @ of the test's own is kept
        ("t.py::test_a[x@gpu]@gpu", [xdist_group("gpu")], "t.py::test_a[x@gpu]"),
        ("t.py::test_a[x@gpu]", [], "t.py::test_a[x@gpu]"),
        ("t.py::test_a[x@gpu]", [xdist_group("other")], "t.py::test_a[x@gpu]"),
        # not rewritten (no loadgroup, or pytest 9.2, whose xdist rewrite has no effect)
        ("t.py::test_a", [xdist_group("gpu")], "t.py::test_a"),
        ("t.py::Test::test_a@gpu", [xdist_group("gpu")], "t.py::Test::test_a"),
    ],
)
def test_the_loadgroup_suffix_is_dropped_and_nothing_else(nodeid, marks, expected):
    assert plain_nodeid(Grouped(nodeid, *marks)) == expected  # type: ignore[arg-type]
