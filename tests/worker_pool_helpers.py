"""A worker for tests/test_worker_pool.py, importable by the spawned worker processes."""

import os
import time


def sleeping_worker(directory: str) -> None:
    """Say this worker's pid (a file named by it in ``directory``), then work for a long time."""
    open(os.path.join(directory, str(os.getpid())), "w").close()
    time.sleep(120)
