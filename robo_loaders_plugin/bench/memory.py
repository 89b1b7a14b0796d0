"""Peak memory of a process tree, sampled from outside the measured process.

RSS counts a page shared by N processes N times (a forked worker "has" the whole parent cache), so the
headline figure is PSS (shared pages divided among the processes that map them), summed over the tree. RAM-only
cache files in /dev/shm that the tree created live in RAM whether or not a page is mapped, so they are counted
in full, once, and their mapped pages are taken out of the PSS figure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import threading
import time

import psutil

from robo_loaders_plugin.core.paths import default_shm_dir


def _tree(pid: int):
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _pss_anon(pid: int) -> int:
    """Proportional anonymous memory of a process (``Pss_Anon`` of ``/proc/<pid>/smaps_rollup``): what it holds
    that the kernel cannot take back without swap, unlike the pages of files it maps (``Pss_File``: a cache file on
    disk kept by the page cache, given back under memory pressure). 0 when the kernel does not say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _shm_bytes(paths) -> int:
    """Size of the RAM cache files the tree maps or has open (each counted once: ranks of a host share one)."""
    total = 0
    for p in set(paths):
        with contextlib.suppress(OSError):  # gone since it was listed
            total += os.path.getsize(p)
    return total


class TreeMemorySampler:
    """Samples every ``interval`` seconds. Why not more often: PSS comes from the kernel walking every mapping of
    every process (``smaps_rollup``: ~18 ms of CPU for a torch process with ~3,000 mappings), taken from the same
    cores the measured loader runs on; at 0.1 s that was ~15% of a core per process of the tree."""

    def __init__(self, pid: int, interval: float = 0.5, disk_dir: str | None = None):
        """``disk_dir``: also record the peak of the space used on its filesystem since the start (``peak_disk``:
        what the run wrote there, a cache file or shards, deleted or not; other writers on it count too)."""
        self.pid = pid
        self.interval = interval
        self.peak_pss = 0
        self.peak_rss = 0
        self.peak_shm = 0
        self.peak_anon = 0  # Pss_Anon of the tree plus its RAM files: held memory, page cache of mapped files left out
        self.disk_dir, self.peak_disk = disk_dir, 0
        # the sampler's own CPU seconds (its thread's, the kernel's walks of the mappings included): taken from the
        # cores the measured loader runs on, so a row says what its measurement cost (cpu_s)
        self.cpu_s = 0.0
        self._free0 = self._free() if disk_dir else 0
        self.ram_prefix = os.path.join(default_shm_dir(), "robo-loaders-")  # storage.ramfile's per-user directories
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _free(self) -> int | None:
        import shutil

        try:
            return shutil.disk_usage(self.disk_dir).free
        except OSError:  # unknown (not 0: the whole free space would count as used)
            return None

    def sample(self) -> None:
        """Take one sample and raise the peaks: PSS and RSS summed over the process tree, Pss_Anon, the RAM cache
        files the tree maps or opens (counted once, not in every process's PSS), and the disk space used since the
        start when ``disk_dir`` was given. Processes that end or cannot be read meanwhile are skipped."""
        pss = rss = anon = 0
        procs = _tree(self.pid)
        ram_files = []
        # parsing every mapping (smaps) of a torch process costs CPU the measured loader competes for on a small
        # machine: only when a RAM cache exists at all
        scan_maps = bool(glob.glob(glob.escape(self.ram_prefix) + "*/[!.]*"))  # an entry (or a build) of any store
        for p in procs:
            try:
                info = p.memory_full_info()
                pss += getattr(info, "pss", info.rss)
                rss += info.rss
                anon += _pss_anon(p.pid)
                if not scan_maps:
                    continue
                for m in p.memory_maps(grouped=True):
                    if m.path.startswith(self.ram_prefix):
                        pss -= m.pss
                        ram_files.append(m.path)
                ram_files += [f.path for f in p.open_files() if f.path.startswith(self.ram_prefix)]  # builds too
            except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
                pass
        shm = _shm_bytes(ram_files)
        self.peak_pss = max(self.peak_pss, pss + shm)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_shm = max(self.peak_shm, shm)
        self.peak_anon = max(self.peak_anon, anon + shm)
        if self.disk_dir:
            free = self._free()
            if free is not None and self._free0 is not None:
                self.peak_disk = max(self.peak_disk, self._free0 - free)

    def _run(self):
        while not self._stop.is_set():
            t = time.thread_time()
            self.sample()
            self.cpu_s += time.thread_time() - t
            self._stop.wait(self.interval)  # woken at the end, not a whole interval later
