"""Who holds a tensor, and where it was made."""

from __future__ import annotations

import torch

from pytest_torch.memory.culprits import creation_sites, describe_holder

kept_globally = {}


class Trainer:
    def __init__(self):
        self.losses = []


def test_holders_are_described_by_name():
    tensor = torch.ones(1)
    kept_globally["last"] = tensor
    try:
        assert (
            describe_holder(tensor)
            == "key `last` of dict `kept_globally` in module `test_culprits`"
        )
    finally:
        kept_globally.clear()

    trainer = Trainer()
    trainer.losses.append(tensor)
    assert describe_holder(tensor) == "list in attribute `losses` of a `Trainer` object"

    def make_closure():
        captured = [tensor]
        return lambda: captured

    closure = make_closure()
    assert describe_holder(tensor, ignore=[trainer.losses]) == (
        "list `captured` captured by function"
        " `test_holders_are_described_by_name.<locals>.make_closure.<locals>.<lambda>`"
    )
    del closure


def test_a_tensor_held_only_by_a_local_variable_has_no_named_holder():
    tensor = torch.ones(1)
    assert describe_holder(tensor) is None


def test_creation_sites_name_the_calling_line():
    sites = creation_sites()
    with sites:
        made = torch.zeros(3) + 1  # the line
    site = sites.site_of(made)
    assert site is not None
    assert site.function == "test_creation_sites_name_the_calling_line"
    assert site.describe().endswith("`made = torch.zeros(3) + 1  # the line`")
    assert sites.site_of(torch.ones(1)) is None
