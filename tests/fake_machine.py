"""A machine of given sizes for the footprint tests: ``Available.measure`` replaced, so that a plan is made against
known memory, disk and GPU whatever this machine has (the plans themselves are pure functions of the sizes)."""

from robo_loaders_plugin.core.footprint import Available


def patch_available(monkeypatch, host: int = 10**12, device: int | None = None) -> None:
    """Make ``Available.measure`` report ``host`` bytes of memory, a terabyte of disk in the directory asked about,
    no RAM-file space, and ``device`` bytes of GPU memory (``None``: no GPU).

    Args:
        monkeypatch: pytest's fixture (undone after the test).
        host: Available host memory.
        device: Free GPU memory, or ``None``.
    """
    monkeypatch.setattr(
        Available,
        "measure",
        classmethod(
            lambda cls, **k: Available(
                host_bytes=host,
                shm_bytes=0,
                shm_dir="/dev/shm",
                shm_is_ram=True,
                disk_bytes=10**12,
                disk_dir=k.get("disk_dir"),
                device_bytes=device,
                device=None if device is None else "cuda:0",
            )
        ),
    )
