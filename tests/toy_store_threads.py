"""Frame stores for tests/test_sdk.py's checks of how the SDK reads a store: how many threads are inside its ``take``
at once (a store not declared thread-safe is read by one), its own errors, and its low-dim hooks."""

from __future__ import annotations

import threading
import time

from toy_store import EveryFieldFrames, EveryFieldStore


class OverlapFrames(EveryFieldFrames):
    """Counts how many threads are inside ``take`` at once (each stays a few ms), and which low-dim hooks a mixture
    called; records ``fail`` to raise a store's own error."""

    inside, most, hooks, fail = 0, 0, [], False
    guard = threading.Lock()
    low_dim_up_front = False

    def take(self, field, episodes, steps, out):
        if OverlapFrames.fail:
            raise ValueError("could not broadcast input array from shape (3,7) into shape (4,7)")
        with OverlapFrames.guard:
            OverlapFrames.inside += 1
            OverlapFrames.most = max(OverlapFrames.most, OverlapFrames.inside)
        time.sleep(0.005)
        try:
            super().take(field, episodes, steps, out)
        finally:
            with OverlapFrames.guard:
                OverlapFrames.inside -= 1

    def gather_low_dim(self, fields, episodes, steps):
        OverlapFrames.hooks.append("gather_low_dim")
        return super().gather_low_dim(fields, episodes, steps)

    def low_dim_of_unit(self, fields, episode):
        OverlapFrames.hooks.append("low_dim_of_unit")
        return super().low_dim_of_unit(fields, episode)


class OverlapStore(EveryFieldStore):
    """A store whose frames count the threads reading them at once; not declared thread-safe."""

    kind = "overlap-1"

    def open(self, directory, options):
        return OverlapFrames(directory)


class ThreadSafeOverlapStore(OverlapStore):
    """The same store, declared thread-safe."""

    kind = "overlap-safe-1"
    thread_safe = True
