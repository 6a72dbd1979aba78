"""A test's id as its user names it, whatever pytest-xdist did to it.

With ``--dist loadgroup`` (pytest-xdist, pytest before 9.2), each worker appends
``@<group>`` to the id of every test marked ``xdist_group``: ``test_x.py::test_y@gpu``.
Anything keyed or selected by the test's id must not see that: a baseline recorded in a
serial run would be missing under ``-n``, a seed derived from the id would differ from
the serial run's, a command printed to run the test again would find no test, and the
ranks of a distributed test, whose own sessions never add it, would find no test either.
"""

from __future__ import annotations

import pytest


def plain_nodeid(item: pytest.Item) -> str:
    """``item.nodeid`` without the ``@<group>`` suffix pytest-xdist's ``loadgroup``
    scheduling gave it (built from the item's ``xdist_group`` markers as xdist builds
    it, so a ``@`` of the test's own, in a parameter id, is kept)."""
    nodeid = item.nodeid
    names = set()
    for mark in item.iter_markers("xdist_group"):
        names.add(str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")))
    suffix = "@" + "_".join(sorted(names))
    if names and nodeid.endswith(suffix):
        return nodeid[: -len(suffix)]
    return nodeid
