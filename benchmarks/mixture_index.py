"""The mixture index (issue 44 item 3): the seconds a LeRobot mixture's metadata check takes with N components,
before the index (every start reads every component's ``meta/`` with LeRobot's ``LeRobotDatasetMetadata``), on a
first start with the index (read in parallel, kept) and on a second (reused: stats only), and with one component
edited between starts (read alone).

``python -m benchmarks.mixture_index --components 100 400 --json benchmarks/results/mixture_index.json``

``--framework robomimic``: the same for ``train.data_mixture``'s checks (``robomimic.mixture.check_components``):
before the index every start opened every component's HDF5 file, one after the other (``robomimic.mixture_meta.
read_record`` of each, what the checks read); with it, the first start reads them in the pool and keeps them, a
second stats each file; "one edited" touches one file (a new mtime: read again alone). Its files: ``--components``
small robomimic files (2 demos of 20-24 steps, two 32x32 cameras, the three layouts of ``benchmarks/mixtures_
robomimic.py`` in turn), written once into ``--data``.

Its datasets: ``--written`` small datasets (2 episodes of 20-24 frames, one 32x32 camera: ``benchmarks/mixtures.py``'s
start-up datasets) written with the plugin's fast LeRobot writer into ``--data`` (kept there, reused when present),
and for larger N, copies of their ``meta/`` folders (all the check reads) under other names. Each measurement is
the median of ``--repeats`` in this process (imports done first); the machine's load is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.mixtures import lengths, write


def components(data: str, written: int, n: int) -> list[dict]:
    """``n`` components: the first ``written`` written (once), the rest copies of their ``meta/``."""
    out = []
    for i in range(n):
        root = os.path.join(data, f"{i:03d}")
        if not os.path.exists(os.path.join(root, "meta", "info.json")):
            if i < written:
                rng = np.random.default_rng(1000 + i)
                write(root, f"mix/s1_{i:03d}", episode_lengths=lengths(rng, 2, (20, 24)), cameras=1,
                      image_size=(32, 32), seed=i)  # fmt: skip
            else:
                shutil.copytree(os.path.join(data, f"{i % written:03d}", "meta"), os.path.join(root, "meta"))
        out.append({"repo_id": f"mix/s1_{i % written:03d}", "root": root, "weight": 1.0})
    return out


def timed(fn, repeats: int) -> tuple[float, object]:
    """The median seconds of ``repeats`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def measure(spec, cache: str, repeats: int) -> dict:
    """One N's row (module docstring)."""
    from robo_loaders_plugin.lerobot.mixture_meta import check_components, component_metas, indexed_metas
    from robo_loaders_plugin.mixtures.index import ComponentIndex

    load = [os.getloadavg()[0]]
    before, _ = timed(lambda: check_components(spec, component_metas(spec, None), None), repeats)
    shutil.rmtree(cache, ignore_errors=True)
    first, _ = timed(lambda: check_components(spec, indexed_metas(spec, None, cache), None), 1)
    second, _ = timed(lambda: check_components(spec, indexed_metas(spec, None, cache), None), repeats)
    info = os.path.join(str(spec.components[len(spec.components) // 2].root), "meta", "info.json")
    with open(info, "rb") as f:
        content = f.read()
    with open(info, "wb") as f:  # the same bytes written again: a new mtime, so this component is read again
        f.write(content)
    reread: list = []
    original = ComponentIndex.records

    def records(self, paths):
        out = original(self, paths)
        reread.extend(self.reread)
        return out

    ComponentIndex.records = records  # type: ignore[method-assign]
    try:
        edited, _ = timed(lambda: check_components(spec, indexed_metas(spec, None, cache), None), 1)
    finally:
        ComponentIndex.records = original  # type: ignore[method-assign]
    load.append(os.getloadavg()[0])
    return {
        "components": len(spec.components),
        "before_s": round(before, 3),
        "first_s": round(first, 3),
        "second_s": round(second, 3),
        "one_edited_s": round(edited, 3),
        "one_edited_reread": len(reread),
        "speedup_second": round(before / second, 1),
        "load_avg": [round(x, 2) for x in load],
    }


def robomimic_config(data: str, n: int, cache: str):
    """robomimic's ``bc`` config of a ``train.data_mixture`` of ``n`` small files (written once into ``data``)."""
    from robomimic.config import config_factory

    from benchmarks.mixtures_robomimic import LAYOUTS, LOW_DIM, RGB, write

    comps = []
    for i in range(n):
        name = list(LAYOUTS)[i % len(LAYOUTS)]
        path = os.path.join(data, "robomimic", f"{i:03d}_{name}.hdf5")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write(path, name, 1000 + i, 2, (20, 24), 32)
        comps.append({"path": path, "rename": LAYOUTS[name], "weight": 1.0})
    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = comps[0]["path"]
        config.observation.modalities.obs.rgb = list(RGB)
        config.observation.modalities.obs.low_dim = list(LOW_DIM)
        config.train.hdf5_load_next_obs = False  # the files hold no next_obs (as the bc config reads them)
        config.train.data_backend_kwargs = {"cache_dir": cache}
        config.train.data_mixture = {"components": comps}
    return config, list(LOW_DIM) + list(RGB)


def measure_robomimic(data: str, n: int, cache: str, repeats: int) -> dict:
    """One N's robomimic row (module docstring)."""
    from robo_loaders_plugin.robomimic.mixture import check_components, filter_settings, mixture_spec
    from robo_loaders_plugin.robomimic.mixture_meta import read_record

    config, keys = robomimic_config(data, n, cache)
    spec = mixture_spec(config)
    filters = [c.filter_key for c in spec.components]
    settings = filter_settings(spec, filters, validating=False)
    load = [os.getloadavg()[0]]
    before, _ = timed(lambda: [read_record(str(k), c.source, None, settings[k]) for k, c in enumerate(spec.components)],
                      repeats)  # fmt: skip
    shutil.rmtree(cache, ignore_errors=True)
    first, _ = timed(lambda: check_components(spec, config, keys, filters), 1)
    second, _ = timed(lambda: check_components(spec, config, keys, filters), repeats)
    os.utime(spec.components[n // 2].source)  # a new mtime: this file is read again
    edited, _ = timed(lambda: check_components(spec, config, keys, filters), 1)
    load.append(os.getloadavg()[0])
    return {
        "framework": "robomimic",
        "components": n,
        "before_s": round(before, 3),
        "first_s": round(first, 3),
        "second_s": round(second, 3),
        "one_edited_s": round(edited, 3),
        "speedup_second": round(before / second, 1),
        "load_avg": [round(x, 2) for x in load],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=["lerobot", "robomimic"], default="lerobot")
    p.add_argument("--components", type=int, nargs="+", default=[100, 400])
    p.add_argument("--written", type=int, default=100)
    p.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "robo-loaders-mixture-index"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args(argv)
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.lerobot.mixture import parse

    rows = []
    for n in a.components:
        with tempfile.TemporaryDirectory() as cache:
            if a.framework == "robomimic":
                row = measure_robomimic(a.data, n, os.path.join(cache, "root"), a.repeats)
            else:
                spec = parse({"components": components(a.data, a.written, n)})
                row = measure(spec, os.path.join(cache, "root"), a.repeats)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if a.json:
        doc = {"kind": "mixture_index", "framework": a.framework, "machine": machine(), "written": a.written}
        doc.update(repeats=a.repeats, rows=rows)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
