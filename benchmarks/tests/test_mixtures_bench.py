"""``benchmarks/mixtures.py`` at its smallest setting, in process (seconds: tiny datasets, 1-2 timed batches), so the
script keeps running as the mixture code changes; and docs/benchmarks.md's mixture tables against the committed
result. No timing is asserted: the numbers are the benchmark's, on its machine."""

import copy
import importlib
import json
import os

import pytest

from benchmarks import mixtures, mixtures_report, mixtures_robomimic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT = os.path.join(ROOT, "benchmarks", "results", "mixtures.json")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")


def test_smallest_setting_measures_every_loader_and_removes_its_data(tmp_path):
    work = tmp_path / "work"  # created by the run, so removed with it
    out = tmp_path / "mixtures.json"
    result = mixtures.run("small", out=str(out), plots=str(tmp_path / "plots"), workdir=str(work), in_process=True)
    assert not work.exists(), "the generated datasets must be removed after the run"
    assert json.loads(out.read_text())["kind"] == "mixtures"
    rows = result["rows"]
    assert not [r for r in rows if r.get("error")], [r["error"] for r in rows if r.get("error")]

    small = mixtures.SIZES["small"]
    rm = small["robomimic"]
    thr = [r for r in rows if r["kind"] == "throughput"]

    def setting(framework, name):
        return [r for r in thr if r["framework"] == framework and r["setting"] == name]

    expected = {
        ("lerobot", "layouts"): [mixtures.REFERENCE, *small["backends"]],
        ("lerobot", "rates"): [mixtures.REFERENCE, "gpu_resampler"],
        ("lerobot", "many"): [mixtures.REFERENCE, *small["backends"]],
        ("robomimic", "layouts"): [mixtures.REFERENCE, *rm["backends"]],
        ("robomimic", "rates"): [mixtures.REFERENCE, "gpu_resampler"],
        ("robomimic", "many"): [mixtures.REFERENCE, *rm["backends"]],
    }
    for (framework, name), labels in expected.items():
        assert [r["backend"] for r in setting(framework, name)] == labels, (framework, name)
    assert len(thr) == sum(map(len, expected.values()))
    for r in thr:
        n = small["many_components"] if r["setting"] == "many" and r["framework"] == "lerobot" else 3
        n = rm["many_components"] if r["setting"] == "many" and r["framework"] == "robomimic" else n
        assert r["samples_per_s"] > 0 and r["startup_s"] >= r["build_s"] > 0
        assert r["ratios"]["samples_per_s_vs_reference"] > 0
        assert len(r["share"]) == n and abs(sum(r["share"]) - 1) < 1e-3, r
        assert len(r["load_avg"]) == 2  # the machine's state beside the timing
    # the components really differ in layout and rate, and the mixture keeps the camera every one has
    comps = result["components"]
    lr = comps["throughput"]
    assert [c["rename"] for c in lr["layouts"]] == [layout[1] for layout in mixtures.LAYOUTS.values()]
    assert [c["root"] for c in lr["rates"]] == ["a20", "b10", "c30"]
    assert "20 fps" in next(r for r in setting("lerobot", "rates") if r["backend"] == "gpu_resampler")["summary"]
    rc = comps["robomimic"]
    assert [c["rename"] for c in rc["layouts"]] == list(mixtures_robomimic.LAYOUTS.values())
    assert [c["path"] for c in rc["rates"]] == ["a20.hdf5", "b10.hdf5", "c30.hdf5"]
    # robomimic's rates really differ: converted to 20 Hz, the 10 Hz file has about twice the windows, the 30 Hz
    # one two thirds (the reference serves them at their own rates)
    rates = {r["backend"]: r for r in setting("robomimic", "rates")}
    assert rates["gpu_resampler"]["num_samples"] != rates[mixtures.REFERENCE]["num_samples"]
    assert rates["gpu_resampler"]["frames"] == rates[mixtures.REFERENCE]["frames"]

    startup = [r for r in rows if r["kind"] == "startup"]
    settings = {(r["components"], r["frames_scale"]) for r in startup}
    assert {(n, 1) for n in small["startup_components"]} <= settings
    assert {(small["startup_scaled"], s) for s in small["startup_scales"]} <= settings
    for r in startup:
        assert r["startup_s"] > 0 and r["prepare_s"] >= 0
        assert ("once_s" in r) == (r["backend"] == "compressed_cache")
    # more frames per component at the same count of components: the frames axis really grows
    scaled = sorted((r for r in startup if r["components"] == small["startup_scaled"]), key=lambda r: r["frames_scale"])
    assert scaled[0]["frames"] < scaled[-1]["frames"]

    assert sorted(os.listdir(tmp_path / "plots")) == ["mixtures_startup.png", "mixtures_throughput.png"]
    table = mixtures.tables(result)
    for framework, name in expected:
        assert f"{mixtures_report.FRAMEWORK_NAMES[framework]}, {name}**" in table


def test_data_is_never_generated_inside_the_repository(tmp_path):
    with pytest.raises(SystemExit, match="inside the repository"):
        mixtures.work_dir(os.path.join(ROOT, "bench_out"))
    made, created = mixtures.work_dir(str(tmp_path))  # control: outside it, a fresh directory in the one given
    assert os.path.dirname(made) == str(tmp_path) and created is None


def doc_tables() -> str:
    text = open(DOC).read()
    start, end = text.index(mixtures.DOC_BEGIN) + len(mixtures.DOC_BEGIN), text.index(mixtures.DOC_END)
    return text[start:end].strip("\n")


@pytest.mark.fast
def test_docs_tables_are_the_committed_results():
    """docs/benchmarks.md's mixture tables are ``python -m benchmarks.mixtures table`` of the committed result."""
    with open(RESULT) as f:
        result = json.load(f)
    assert doc_tables() == mixtures.tables(result).strip("\n"), (
        "docs/benchmarks.md's mixture tables differ from benchmarks/results/mixtures.json: paste "
        "`python -m benchmarks.mixtures table benchmarks/results/mixtures.json` between its markers"
    )
    changed = copy.deepcopy(result)  # control: another number is caught
    next(r for r in changed["rows"] if not r.get("error"))["samples_per_s"] *= 2
    assert doc_tables() != mixtures.tables(changed).strip("\n")


def test_pretraining_shaped_mixture_measures_every_loader_on_the_same_keys(tmp_path):
    """``benchmarks/mixtures_pretraining.py`` at its smallest: the growth curve and the one dataset for every loader,
    and the hand-written reference serves the keys and shapes the plugin's mixture serves (vectors padded to 14 with
    their masks, the cameras a robot lacks as zeros with their flags), so the two are compared on the same batches;
    the control, the reference without its padding, cannot even batch the three robots."""
    from benchmarks import mixtures_child, mixtures_pretraining

    work = tmp_path / "work"
    result = mixtures_pretraining.run("small", out=str(tmp_path / "p.json"), workdir=str(work), in_process=True)
    assert not work.exists()
    rows = result["rows"]
    assert not [r for r in rows if r.get("error")], [r["error"] for r in rows if r.get("error")]
    small = mixtures_pretraining.SIZES["small"]
    loaders = (mixtures_pretraining.REFERENCE, *small["backends"])
    assert sorted((r["backend"], r["components"], r["single"]) for r in rows) == sorted(
        [(b, n, False) for b in loaders for n in small["growth"]] + [(b, 1, True) for b in loaders]
    )
    mixed = {r["backend"]: r for r in rows if r["components"] == 3}
    want = mixed[mixtures_pretraining.REFERENCE]["batch_keys"]
    assert want["action"][-1] == 14 and "action_dim_mask" in want and "observation.images.cam2_is_missing" in want
    for backend in small["backends"]:
        assert mixed[backend]["batch_keys"] == want, backend
    assert "samples_per_s_vs_single" in mixed["compressed_cache"] and "once_s" in mixed["compressed_cache"]
    assert "| compressed_cache |" in mixtures_pretraining.tables(result)

    # control: the reference without its padding (the keys every component has) cannot batch them
    import shutil

    comps, _ = mixtures_pretraining.generate(str(tmp_path / "control"), dict(small, components=3))
    args = dict(
        backend=mixtures_pretraining.REFERENCE,
        components=mixtures_pretraining._child_components(comps),
        preset="act",
        batch_size=small["batch_size"],
        num_workers=0,
        batches=1,
        seed=0,
        target_fps=None,
    )
    padded = mixtures_child.run(dict(args, spec=mixtures_pretraining.SPEC))["batch_keys"]
    assert padded == want
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):  # 7, 14, 6 wide vectors
        mixtures_child.run(dict(args, spec={}))
    shutil.rmtree(tmp_path / "control")


def test_mixture_batch_cost_times_both_ways_of_building_a_mixed_batch(tmp_path):
    """``benchmarks/mixture_batch_cost.py`` at its smallest: each backend's mixed batches timed per component and
    joined, with their parts and frame reads counted, and the one dataset's; its data removed afterwards."""
    from benchmarks import mixture_batch_cost

    work = tmp_path / "work"
    result = mixture_batch_cost.run(
        components=3, batches=6, batch_size=4, workdir=str(work), backends=("compressed_cache",), size_name="small"
    )
    assert not work.exists()
    (row,) = result["rows"]
    assert row["joined"] and row["paths"]["per_component"]["parts_ms"]["component_parts"] > 0
    assert row["paths"]["joined"]["parts_ms"]["component_parts"] == 0  # joined: no component builds its own part
    assert row["paths"]["per_component"]["reads_per_batch"] > 0 and row["single_reads_per_batch"] > 0
    # joined: each camera read across the components in one call (join_field), fewer calls than per component
    assert 0 < row["paths"]["joined"]["reads_per_batch"] < row["paths"]["per_component"]["reads_per_batch"]
    assert "| compressed_cache |" in mixture_batch_cost.table(result)


# (benchmark module, its function rendering docs/benchmarks.md's tables, a number of a row the control changes)
DOC_TABLES = [("mixtures_pretraining", "tables", "samples_per_s"), ("mixture_batch_cost", "table", "single_ms")]


@pytest.mark.fast
@pytest.mark.parametrize("name,render,number", DOC_TABLES, ids=[n for n, _, _ in DOC_TABLES])
def test_docs_table_is_the_committed_result(name, render, number):
    """docs/benchmarks.md's tables of ``benchmarks/<name>.py`` are its ``table`` command's output on the committed
    result, so no number there is typed by hand or outlives a new run; control: another number is caught."""
    module = importlib.import_module(f"benchmarks.{name}")
    with open(os.path.join(ROOT, "benchmarks", "results", f"{name}.json")) as f:
        result = json.load(f)
    text = open(DOC).read()
    doc = text[text.index(module.DOC_BEGIN) + len(module.DOC_BEGIN) : text.index(module.DOC_END)].strip("\n")
    tables = getattr(module, render)
    assert doc == tables(result).strip("\n"), (
        f"docs/benchmarks.md's {name} tables differ from benchmarks/results/{name}.json: paste "
        f"`python -m benchmarks.{name} table benchmarks/results/{name}.json` between its markers"
    )
    changed = copy.deepcopy(result)
    next(r for r in changed["rows"] if not r.get("error"))[number] *= 2
    assert doc != tables(changed).strip("\n")
