"""Every use of torch and torchdata internals, in one place, with the versions they were checked against.

Why they are needed: ``indexed`` backends build the DataLoader's batches in-process and must consume its RNG the
way ``DataLoader.__iter__`` does; torchdata's node threads are daemons that must be stopped before the
interpreter finalizes. ``robo-loaders doctor`` runs :func:`checks`.
"""
from __future__ import annotations

from robo_loaders_plugin.core.checks import Check

import torch

CHECKED_TORCH = "2.11"
CHECKED_TORCHDATA = "0.11"


def draw_dataloader_base_seed(generator) -> None:
    """Advance ``generator`` (or torch's global RNG) as ``DataLoader.__iter__`` does before sampling.

    Why: torch's ``_BaseDataLoaderIter.__init__`` draws one int64 base seed for the workers
    (``loader._get_shared_seed`` -> ``torch.empty((), dtype=torch.int64).random_(generator=loader.generator)``);
    an ``indexed`` backend that draws its indices from the sampler in-process must consume the same draw, or its
    order would differ from the DataLoader's.

    Args:
        generator: The DataLoader's ``torch.Generator``, or ``None`` for torch's global RNG.
    """
    torch.empty((), dtype=torch.int64).random_(generator=generator)


def shutdown_node_threads(root) -> None:
    """Stop and join the threads of a torchdata.nodes graph.

    Why: the nodes' threads are daemons, which must be stopped before the interpreter finalizes. Relies on
    torchdata 0.11's internals: each node keeps its running iterator in ``_it``, and thread-based iterators have
    ``_shutdown()``.

    Args:
        root: The graph's last node; the walk follows ``_it`` and ``source`` from it (``None`` does nothing).
    """
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        it = getattr(node, "_it", None)
        if it is not None:
            if hasattr(it, "_shutdown"):
                it._shutdown()
            stack.append(it)
        stack.append(getattr(node, "source", None))


def checks() -> list[Check]:
    """Rows for ``robo-loaders doctor``."""
    rows = []
    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, shuffle=True, generator=g)
    ref = torch.Generator().manual_seed(0)
    draw_dataloader_base_seed(ref)
    expected = [b.tolist() for b in torch.utils.data.DataLoader(list(range(4)), batch_size=2,
                                                                sampler=torch.utils.data.RandomSampler(range(4), generator=ref))]
    got = [b.tolist() for b in loader]
    rows.append(Check(f"torch {torch.__version__}: DataLoader draws one base seed per iter()", got == expected,
                 "in-process batches follow the DataLoader's order" if got == expected else
                 f"order differs ({got} vs {expected}): the indexed backends' in-process batches would not match"))
    try:
        import torchdata
        from torchdata.nodes import IterableWrapper, ParallelMapper

        node = ParallelMapper(IterableWrapper(range(4)), map_fn=lambda x: x, num_workers=1, method="thread")
        node.reset()
        next(node)
        it, ok = node, False
        while (it := getattr(it, "_it", None)) is not None:
            ok = ok or hasattr(it, "_shutdown")
        shutdown_node_threads(node)
        rows.append(Check(f"torchdata {getattr(torchdata, '__version__', '?')}: node threads can be stopped", ok,
                          "a _shutdown() in ParallelMapper's _it chain" + (" found" if ok else " missing: pipelines may "
                                                                           "abort at exit")))
    except ImportError as exc:
        rows.append(Check("torchdata (datapipe backend)", False, f"not importable: {exc}", required=False))
    return rows
