"""``mixtures.dataset.garbage_collected_once``: a mixture's build runs with the objects from before it frozen and
ends with one full collection, which finds the build's cyclic garbage; the freeze never outlives the block, never
happens with collection disabled, and nested blocks collect once."""

import gc
import weakref

import pytest

from robo_loaders_plugin.mixtures import dataset
from robo_loaders_plugin.mixtures.dataset import garbage_collected_once


def left_frozen() -> int:
    """How many objects a full collection leaves frozen (CPython 3.12's immortal ones: a few hundred)."""
    gc.collect()
    return gc.get_freeze_count()


class Node:
    """An object in a reference cycle: only a full collection frees it."""

    def __init__(self):
        self.me = self


@pytest.fixture
def collections(monkeypatch):
    """The full collections asked for (``gc.collect`` watched). Before: nothing frozen but what a full collection
    leaves in CPython's permanent generation (3.12 keeps its immortal objects there: :func:`left_frozen`)."""
    gc.unfreeze()
    gc.collect()
    asked: list[int] = []
    collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: asked.append(1) or collect(*a))
    enabled = gc.isenabled()
    yield asked
    if enabled:
        gc.enable()


def test_the_build_runs_frozen_and_its_cyclic_garbage_is_collected_at_its_end(collections):
    base = left_frozen()
    collections.clear()
    before = [Node() for _ in range(1000)]
    with garbage_collected_once():
        assert gc.get_freeze_count() >= base + len(before)  # the objects from before are frozen
        gc.disable()  # no automatic collection finds it first
        made = Node()
        alive = weakref.ref(made)
        del made
        assert alive() is not None and not collections  # control: nothing collected it during the build
        gc.enable()
    assert alive() is None and collections == [1]
    assert gc.get_freeze_count() == base  # the objects from before are unfrozen: later collections see them


def test_nested_blocks_collect_once_and_an_exception_unfreezes_without_collecting(collections):
    base = left_frozen()
    collections.clear()
    with garbage_collected_once():
        with garbage_collected_once():
            pass
        assert not collections and gc.get_freeze_count() > base  # the inner block left the freeze and the collection
    assert collections == [1] and gc.get_freeze_count() == base
    with pytest.raises(ValueError), garbage_collected_once():
        raise ValueError("a refused component")
    assert collections == [1] and gc.get_freeze_count() <= base and dataset._BUILDS_OPEN == [0]  # not collected


def test_nothing_is_frozen_with_collection_disabled(collections):
    base = gc.get_freeze_count()
    gc.disable()
    try:
        with garbage_collected_once():
            assert gc.get_freeze_count() == base
    finally:
        gc.enable()
    assert collections == [1]  # the build's garbage still collected once as it ends
