"""Who holds a tensor, and where it was made."""

from __future__ import annotations

import functools

import torch

from pytest_torch.memory.culprits import creation_sites, describe_holder, find_holder, short_repr

kept_globally = {}
step_outputs = []

#: this module as the messages name it: pytest's importlib mode names it after its path,
#: shortened to its last part where that is no Python name (in the repository,
#: packages.pytest-torch-memory.tests.test_culprits), whole where it is (run from the
#: sdist, tests.test_culprits)
MODULE = (
    __name__ if all(p.isidentifier() for p in __name__.split(".")) else __name__.rpartition(".")[2]
)


class Trainer:
    def __init__(self):
        self.losses = []


def test_holders_are_described_by_name():
    tensor = torch.ones(1)
    kept_globally["last"] = tensor
    try:
        assert describe_holder(tensor) == f"key `last` of dict `kept_globally` in module `{MODULE}`"
    finally:
        kept_globally.clear()

    trainer = Trainer()
    trainer.losses.append(tensor)
    assert describe_holder(tensor) == "list in attribute `losses` of a `Trainer` object"

    def make_closure(value):  # an argument, not a cell: the list is the only holder
        captured = [value]
        return lambda: captured

    closure = make_closure(tensor)
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


def _remember(x, cache=[]):  # noqa: B006 (the leak under test)
    cache.append(x)


def _remember_kw(x, *, seen=[]):  # noqa: B006
    seen.append(x)


def test_default_arguments_are_named():
    tensor = torch.ones(2)
    _remember(tensor)
    _remember_kw(tensor)
    try:
        holder = describe_holder(tensor, ignore=[_remember_kw.__kwdefaults__["seen"]])
        assert holder == "list in default argument `cache` of function `_remember`"
        holder = describe_holder(tensor, ignore=[_remember.__defaults__[0]])
        assert holder == "list in default argument `seen` of function `_remember_kw`"
    finally:
        _remember.__defaults__[0].clear()
        _remember_kw.__kwdefaults__["seen"].clear()

    def direct(x, weight=tensor):
        return x * weight

    assert describe_holder(tensor) == (
        "default argument `weight` of function `test_default_arguments_are_named.<locals>.direct`"
    )


def test_keys_are_short_and_tensors_never_show_their_numbers():
    key, value = torch.arange(49.0).reshape(7, 7), torch.ones(3)
    kept_globally[key] = value
    kept_globally[("a" * 100, 1)] = torch.zeros(1)
    try:
        holder = describe_holder(value)
        assert holder == f"key `tensor [7, 7] float32` of dict `kept_globally` in module `{MODULE}`"
        assert describe_holder(key) == f"keys of dict `kept_globally` in module `{MODULE}`"
        long_key = describe_holder(kept_globally[("a" * 100, 1)])
        assert long_key is not None and "('aaaa" in long_key and "..." in long_key
        assert len(long_key.split("`")[1]) == 40
    finally:
        kept_globally.clear()
    assert short_repr(torch.ones(2, 3, dtype=torch.int64)) == "tensor [2, 3] int64"
    assert short_repr(torch.ones(3).to_sparse()) == "sparse_coo tensor [3] float32"
    assert short_repr("step 3") == "step 3"


def test_output_structures_kept_per_step_are_recognised():
    logits = torch.ones(2)
    step_outputs.append({"logits": logits})
    try:
        holder = find_holder(logits)
        assert holder is not None and holder.structure == "dict"
        assert holder.text == f"key `logits` of a dict in list `step_outputs` in module `{MODULE}`"
    finally:
        step_outputs.clear()
    trainer = Trainer()
    trainer.losses.append(torch.ones(1))
    holder = find_holder(trainer.losses[0])
    assert holder is not None and holder.structure is None  # one container: not a structure


class Embedder:
    @functools.lru_cache  # noqa: B019 - the leak these tests are about
    def table(self, size: int) -> torch.Tensor:
        return torch.ones(size)

    @functools.cache  # noqa: B019
    def rows(self, size: int) -> torch.Tensor:
        return torch.ones(size, 2)


def test_a_tensor_in_a_methods_lru_cache_names_the_method_and_its_class():
    embedder = Embedder()
    try:
        for name in ("table", "rows"):  # bounded: held by its entries; unbounded: its dict
            tensor = getattr(embedder, name)(3)
            assert describe_holder(tensor) == (
                f"the cache of `Embedder.{name}` (functools.lru_cache) (attribute `{name}` of"
                f" class `Embedder` in module `{MODULE}`)"
            )
    finally:
        Embedder.table.cache_clear()
        Embedder.rows.cache_clear()
