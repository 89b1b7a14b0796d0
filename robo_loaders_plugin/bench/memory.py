"""Peak memory of a process tree, sampled from outside the measured process.

RSS counts a page shared by N processes N times (a forked worker "has" the whole parent cache), so the
headline figure is PSS (shared pages divided among the processes that map them), summed over the tree. RAM-only
cache files in /dev/shm that the tree created live in RAM whether or not a page is mapped, so they are counted
in full, once, and their mapped pages are taken out of the PSS figure.
"""
from __future__ import annotations

import glob
import os
import threading
import time

import psutil


def _tree(pid: int):
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _shm_bytes(pids) -> int:
    total = 0
    for pid in pids:
        for p in glob.glob(f"/dev/shm/robo-loaders-{pid}-*"):
            try:
                total += os.path.getsize(p)
            except OSError:
                pass
    return total


class TreeMemorySampler:
    def __init__(self, pid: int, interval: float = 0.1):
        self.pid = pid
        self.interval = interval
        self.peak_pss = 0
        self.peak_rss = 0
        self.peak_shm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        pss = rss = 0
        procs = _tree(self.pid)
        for p in procs:
            try:
                info = p.memory_full_info()
                pss += getattr(info, "pss", info.rss)
                rss += info.rss
                for m in p.memory_maps(grouped=True):
                    if m.path.startswith("/dev/shm/robo-loaders-"):
                        pss -= m.pss
            except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
                pass
        shm = _shm_bytes([p.pid for p in procs])
        self.peak_pss = max(self.peak_pss, pss + shm)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_shm = max(self.peak_shm, shm)

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)
