"""What ``robo-loaders report``'s figures say (issue 23 B13): the axis a loss curve is drawn on, exact-parity curves
that stay visible, throughput labels and scale, one colour per backend, ``#tag`` runs, counts, and the files a
report is given but does not plot. The figures are inspected as matplotlib objects (``plots._save`` captured)."""

import glob
import json
import os

import pytest
from click.testing import CliRunner
from report_fakes import bench_payload, dump, training_payload

from robo_loaders_plugin.bench import plots
from robo_loaders_plugin.bench.tables import load_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")


@pytest.fixture
def figures(monkeypatch):
    """Every figure a plot function saves, instead of a PNG."""
    saved = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.append(fig) or path)
    return saved


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_the_lerobot_loss_curve_is_drawn_per_step_and_identical_curves_stay_visible(figures):
    """The committed LeRobot file holds one point per training step (its x is "step"): the axis said "epoch". Its
    backends' losses are bit-identical to native's, so one line hid the other three: the reference is drawn thick
    and pale under thin lines with markers, and the legend says which groups are identical."""
    payload = load_result(os.path.join(RESULTS, "loss_curves", "lerobot_act.json"))
    assert plots.loss_points(payload) == "step"
    plots.plot_loss_curves(payload, "x.png", plots.Palette())
    (fig,) = figures
    ax = fig.axes[0]
    assert ax.get_xlabel() == "training step" and "per step" in fig._suptitle.get_text()
    ref, *others = ax.get_lines()
    assert ref.get_linewidth() > 3 * max(o.get_linewidth() for o in others)  # underneath, wider than the others
    assert len({o.get_marker() for o in others}) == len(others) and all(o.get_marker() != "None" for o in others)
    assert ref.get_zorder() < min(o.get_zorder() for o in others)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[0].startswith("native") and "identical" not in legend[0]
    assert all("identical to native" in t for t in legend[1:]), legend
    assert "identical" in plots.loss_summary(payload) and "last step L1" in plots.loss_summary(payload)


def test_an_epoch_loss_curve_that_differs_is_not_called_identical(figures, tmp_path):
    from benchmarks.harness.loss_curves import loss_run, write_loss_curves

    path = str(tmp_path / "lc.json")
    write_loss_curves(
        path,
        "robomimic",
        [
            loss_run("native", 1, [[1.0], [0.5]], ["L1"]),
            loss_run("datapipe", 1, [[1.0], [0.5000001]], ["L1"]),
            loss_run("compressed_cache", 1, [[1.0], [0.5]], ["L1"]),
        ],
        metrics=["L1"],
        with_machine=False,
    )
    payload = load_result(path)
    plots.plot_loss_curves(payload, "x.png", plots.Palette())
    ax = figures[0].axes[0]
    assert ax.get_xlabel() == "epoch" and ax.get_ylabel() == "loss (mean over the epoch)"
    legend = [t.get_text() for t in figures[0].legends[0].get_texts()]
    assert "identical" not in legend[1] and "identical to native" in legend[2], legend
    with pytest.raises(ValueError, match="x must be 'epoch' or 'step'"):
        write_loss_curves(path, "robomimic", [], x="steps")


def test_throughput_labels_keep_significant_digits_and_a_wide_spread_gets_a_log_axis(figures, tmp_path):
    """Training throughput was labelled "2 (0.88x)" (2.27 samples/s rounded to an integer); native's bar was
    invisible next to 27,605 samples/s on a linear axis."""
    assert [plots.significant(v) for v in (2.2718, 14.63, 0.5, 1292.4, 27605.2)] == [
        "2.27",
        "14.6",
        "0.500",
        "1,292",
        "27,605",
    ]
    train = load_result(dump(tmp_path / "t.json", training_payload()))
    for r in train["results"]:
        r["samples_per_s"] /= 60  # a CPU training benchmark: a few samples/s
    plots.plot_throughput(train, "x.png", plots.Palette())
    ax = figures[-1].axes[0]
    assert ax.get_xscale() == "linear" and "log" not in ax.get_xlabel()
    assert any(
        t.strip().startswith(plots.significant(train["results"][0]["samples_per_s"]) + "  (1.00x") for t in texts(ax)
    ), texts(ax)
    fast = load_result(
        dump(tmp_path / "b.json", bench_payload("lerobot", ("native", "compressed_cache"), epochs=False))
    )
    fast["results"][0]["samples_per_s"], fast["results"][1]["samples_per_s"] = 200.0, 27605.2
    plots.plot_throughput(fast, "x.png", plots.Palette())
    ax = figures[-1].axes[0]
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    native_bar = min(ax.patches, key=lambda b: b.get_width())
    assert native_bar.get_x() + native_bar.get_width() == pytest.approx(200.0) and native_bar.get_x() <= 100
    assert any("27,605" in t for t in texts(ax))


def test_one_colour_per_backend_in_every_figure_and_tagged_runs_are_not_plotted(figures, tmp_path):
    """docs/benchmarks.md promises one colour per backend: it was assigned in the order backends appeared (so
    video_stream changed colour between reports) and a loss curve's label ('compressed_cache (workers 2)') got a
    colour of its own. A ``#tag`` row (another label's options: gpu_resampler#third at a third of the rate) was
    plotted beside the backends as if it measured the same workload."""
    assert plots.color_of("video_stream") == plots.KNOWN_COLORS["video_stream"]
    assert plots.color_of("gpu_resampler#third") == plots.color_of("gpu_resampler")
    assert plots.color_of("my_backend") == plots.color_of("my_backend") in plots.OTHER_COLORS
    assert (
        len(
            {plots.KNOWN_COLORS[b] for b in ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")}
        )
        == 5
    )
    payload = load_result(os.path.join(RESULTS, "robomimic_lift_w2.json"))
    assert any("#" in r["backend"] for r in payload["results"])
    for plot in (plots.plot_throughput, plots.plot_memory, plots.plot_startup):
        plot(payload, "x.png", plots.Palette())
        labels = [t.get_text() for t in figures[-1].axes[0].get_yticklabels()]
        assert labels and not any("#" in x for x in labels), labels
    plots.plot_loss_curves(
        load_result(os.path.join(RESULTS, "loss_curves", "lerobot_act.json")), "x.png", plots.Palette()
    )
    import matplotlib.colors as mc

    lines = figures[-1].axes[0].get_lines()
    assert mc.to_hex(lines[1].get_color()) == plots.KNOWN_COLORS["compressed_cache"]  # 'compressed_cache (workers 0)'


def test_counts_say_worker_and_thread_in_the_singular():
    from robo_loaders_plugin.core.units import plural

    assert (
        plural(1, "worker") == "1 worker" and plural(2, "worker") == "2 workers" and plural(0, "thread") == "0 threads"
    )


def test_report_skips_files_it_does_not_plot_with_one_line_each(tmp_path):
    """``robo-loaders report benchmarks/results/*.json`` stopped at codecs.json (not a result the report plots)."""
    files = sorted(glob.glob(os.path.join(RESULTS, "*.json")))
    assert os.path.join(RESULTS, "codecs.json") in files
    chosen = [os.path.join(RESULTS, "codecs.json"), os.path.join(RESULTS, "robomimic_shared_renders_video_w2.json")]
    r = CliRunner().invoke(plots.report_cmd, chosen + ["--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    skipped = [x for x in lines if x.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith(
        f"skipped {chosen[0]}: not a benchmark, matrix or loss-curves result"
    ), lines
    assert lines[-1] == f"wrote {tmp_path / 'o' / 'report.md'}"
    md = open(tmp_path / "o" / "report.md").read()
    assert "Skipped (not a benchmark, matrix or loss-curves result): `codecs.json`." in md
    r = CliRunner().invoke(plots.report_cmd, chosen[:1] + ["--out", str(tmp_path / "p")])
    assert r.exit_code == 1 and "skipped" in r.output and "none of the 1 file(s) given" in r.output
    with pytest.raises(plots.TableError, match="not a benchmark"):  # the Python API still refuses unless asked
        plots.report(chosen, str(tmp_path / "q"))
    assert json.load(open(chosen[0]))  # codecs.json itself is fine JSON: it is just not a result
