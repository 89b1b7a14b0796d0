"""What both frameworks' mixture tests check the same way, whatever the framework's batch holds."""

import pytest


def check_items_batch_is_parts_batch(mix, same_batch, match: str | None = None) -> None:
    """A ``native`` mixture builds a batch from its items (``MixtureDataset._by_items``: each item renamed, padded,
    filled, then one collate, as the framework's DataLoader does): the same batch as built part by part (each
    component's part by its own collate, then scattered), through ``collate`` too, with ``dataset_index`` naming
    each item's component. Control: the part-by-part batch of other indices differs, which ``same_batch`` sees.

    Args:
        mix: A ``native`` mixture of three components.
        same_batch: The framework's batch comparison, ``same_batch(a, b, what)`` raising ``AssertionError``.
        match: What the control's ``AssertionError`` says (``None``: any).
    """
    idx = [int(mix.offsets[k]) + j for j in range(3) for k in range(3)]  # the components interleaved
    comps, local = mix._layout.split(idx)
    by_parts = mix._by_parts(comps, local)
    same_batch(mix._by_items(comps, local), by_parts, "native")
    batch = mix.collate(idx)
    assert batch["dataset_index"].tolist() == comps.tolist()
    same_batch({k: v for k, v in batch.items() if k != "dataset_index"}, by_parts, "native collate")
    other = mix._by_parts(*mix._layout.split(idx[::-1]))
    with pytest.raises(AssertionError, match=match):
        same_batch(mix._by_items(comps, local), other, "control")


def build_steps(monkeypatch, build) -> list[str]:
    """What a mixture's build does, in order: ``"collect"`` for each full garbage collection it asks for
    (``mixtures.dataset.garbage_collected_once``), ``"record"`` each time a dataset is recorded as built (a component
    built as one dataset, then the mixture: the last step).

    Args:
        monkeypatch: pytest's fixture (``gc.collect`` and ``record_built`` are watched through it).
        build: Builds the mixture.

    Returns:
        The steps.
    """
    import gc

    from robo_loaders_plugin.core import iteration

    steps: list[str] = []
    collect, record = gc.collect, iteration.record_built
    monkeypatch.setattr(gc, "collect", lambda *a: steps.append("collect") or collect(*a))
    monkeypatch.setattr(iteration, "record_built", lambda *a, **k: steps.append("record") or record(*a, **k))
    build()
    monkeypatch.undo()
    return steps
