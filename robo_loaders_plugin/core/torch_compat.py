"""Every use of torch and torchdata internals, in one place (checked against the versions pyproject.toml pins).

Why they are needed: ``indexed`` backends build the DataLoader's batches in-process and must consume its RNG the
way ``DataLoader.__iter__`` does; torchdata's node threads are daemons that must be stopped before the
interpreter finalizes. ``robo-loaders doctor`` runs :func:`checks`.
"""

from __future__ import annotations

import threading
import time

import torch

from robo_loaders_plugin.core.checks import Check


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


def shutdown_node_threads(root, timeout_s: float = 120.0) -> list:
    """Stop and join the threads of a torchdata.nodes graph.

    Why: the nodes' threads are daemons, which must be stopped before the interpreter finalizes. torchdata's own
    ``_shutdown()`` waits only 0.5 s for each thread, and a thread still inside a call into C++ (a 480p video
    unit decodes for seconds) when the interpreter finalizes aborts the process ("terminate called without an
    active exception"), so the threads are then joined until they have stopped (each ends once its current item
    is done: the stop event is set), at most ``timeout_s`` in all. Relies on torchdata 0.11's internals: each node
    keeps its running iterator in ``_it``; thread-based iterators have ``_shutdown()`` and keep their threads in
    ``_read_thread``, ``_sort_thread``, ``_workers`` or ``_thread``.

    Args:
        root: The graph's last node; the walk follows ``_it`` and ``source`` from it (``None`` does nothing).
        timeout_s: The longest wait for the threads, in all.

    Returns:
        The threads still running after the wait (none, unless an item took longer than ``timeout_s``).
    """
    stack, seen, threads = [root], set(), []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        it = getattr(node, "_it", None)
        if it is not None:
            if hasattr(it, "_shutdown"):
                it._shutdown()
            for name in ("_read_thread", "_sort_thread", "_thread"):
                if isinstance(getattr(it, name, None), threading.Thread):
                    threads.append(getattr(it, name))
            threads += [t for t in getattr(it, "_workers", None) or () if isinstance(t, threading.Thread)]
            stack.append(it)
        stack.append(getattr(node, "source", None))
    deadline = time.monotonic() + timeout_s
    for t in threads:
        if t is not threading.current_thread():
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def release_node_iterators(root) -> None:
    """Drop the running iterators of a torchdata.nodes graph whose threads :func:`shutdown_node_threads` stopped.

    Why, at interpreter exit: a pass still suspended then (an iterator kept in a module global or an object living
    to the end) keeps the nodes' iterators referenced, and their ``__del__`` ran during finalisation, after the
    modules' globals were cleared: a torchdata traceback (``'NoneType' object has no attribute 'maxsize'``) printed
    after a successful run (a reviewer's reproduction). Dropped at exit, they are collected while the modules live.

    Args:
        root: The graph's last node; the walk follows ``source`` from it (``None`` does nothing).
    """
    node, seen = root, set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if getattr(node, "_it", None) is not None:
            node._it = None
        node = getattr(node, "source", None)


def checks() -> list[Check]:
    """Rows for ``robo-loaders doctor``."""
    rows = []
    g = torch.Generator().manual_seed(0)
    # a list is a map-style dataset at runtime; torch's annotations ask for a Dataset
    loader: torch.utils.data.DataLoader = torch.utils.data.DataLoader(
        list(range(4)),  # type: ignore[arg-type]
        batch_size=2,
        shuffle=True,
        generator=g,
    )
    ref = torch.Generator().manual_seed(0)
    draw_dataloader_base_seed(ref)
    sampler = torch.utils.data.RandomSampler(range(4), generator=ref)
    expected = [
        b.tolist()
        for b in torch.utils.data.DataLoader(
            list(range(4)),  # type: ignore[arg-type]
            batch_size=2,
            sampler=sampler,
        )
    ]
    got = [b.tolist() for b in loader]
    rows.append(
        Check(
            f"torch {torch.__version__}: DataLoader draws one base seed per iter()",
            got == expected,
            "in-process batches follow the DataLoader's order"
            if got == expected
            else f"order differs ({got} vs {expected}): the indexed backends' in-process batches would not match",
        )
    )
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
        rows.append(
            Check(
                f"torchdata {getattr(torchdata, '__version__', '?')}: node threads can be stopped",
                ok,
                "a _shutdown() in ParallelMapper's _it chain"
                + (" found" if ok else " missing: pipelines may abort at exit"),
            )
        )
    except ImportError as exc:
        rows.append(Check("torchdata (pipeline-served backends)", False, f"not importable: {exc}", required=False))
    return rows
