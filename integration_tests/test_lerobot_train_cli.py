"""The real ``lerobot-train`` console script in a subprocess (CPU, local --dataset.root, no Hub)."""

import json
import os
import re
import subprocess
import sys

import pytest
from forked_runs import ForkedRuns
from lerobot_helpers import REPO
from readme import first_command, section

BIN = os.path.dirname(sys.executable)


def test_env(env_extra=None):
    """The test environment: no Hub, the plugin's import hook armed."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ROBO_LOADERS_DISABLE", None)
    env.update(env_extra or {})
    return env


test_env.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module", autouse=True)
def _forked():
    """lerobot-train's runs of this module, forked from one process that imported LeRobot (forked_runs.py says
    why); the README's command, and runs in another environment, start the console script itself."""
    global FORKED
    # and what every run imports once it reads --dataset.backend (the backends, torchcodec): ~2 s a run
    backends = [f"robo_loaders_plugin.backends.{name}" for name in BACKEND_PACKAGES]
    FORKED = ForkedRuns(["lerobot.scripts.lerobot_train", "torchcodec.decoders", *backends], test_env())
    yield
    FORKED.close()
    FORKED = None


FORKED = None
BACKEND_PACKAGES = ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")


def run(args, env_extra=None, fork=False):
    """``args`` (the program first) in the test environment plus ``env_extra``; ``fork``: a lerobot-train run
    forked from the module's server (the same process the console script would be, the imports done)."""
    if fork and not env_extra and FORKED is not None:
        return FORKED.run(args, entry="lerobot.scripts.lerobot_train:main")
    p = subprocess.run(args, capture_output=True, text=True, env=test_env(env_extra), timeout=600)
    return p.returncode, p.stdout + p.stderr


def lerobot_train(root, out, *extra, env_extra=None, steps=3, repo=REPO, as_module=False):
    """``lerobot-train`` (``as_module``: ``python -m lerobot.scripts.lerobot_train``) on a small ACT, CPU."""
    program = (
        [sys.executable, "-m", "lerobot.scripts.lerobot_train"] if as_module else [os.path.join(BIN, "lerobot-train")]
    )
    args = [
        *program,
        *([f"--dataset.repo_id={repo}"] if repo else []),
        *([f"--dataset.root={root}"] if root is not None else []),
        "--policy.type=act",
        "--policy.pretrained_backbone_weights=null",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        "--policy.dim_model=32",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=64",
        "--policy.chunk_size=10",
        "--policy.n_action_steps=10",
        f"--steps={steps}",
        "--batch_size=4",
        "--num_workers=1",
        f"--save_freq={steps}",
        "--log_freq=1",
        "--wandb.enable=false",
        f"--output_dir={out}",
        *extra,
    ]
    return run(args, env_extra, fork=not as_module)


def saved_dataset_config(out, step):
    path = os.path.join(out, "checkpoints", f"{step:06d}", "pretrained_model", "train_config.json")
    assert os.path.exists(path), f"no checkpoint at {path}"
    with open(path) as f:
        return json.load(f)["dataset"]


@pytest.fixture(scope="module")
def root(lerobot_datasets):
    return lerobot_datasets["av1_1cam"]


def test_backend_flag_trains_and_is_saved_then_resumes(root, tmp_path):
    out = str(tmp_path / "run")
    rc, log = lerobot_train(
        root, out, "--dataset.backend=compressed_cache", '--dataset.backend_kwargs={"codec": "zstd", "level": 3}'
    )
    assert rc == 0, log[-3000:]
    assert f"[robo-loaders] lerobot data backend: compressed_cache [{REPO}]" in log and "(zstd:" in log, log[-3000:]
    saved = saved_dataset_config(out, 3)
    assert saved["backend"] == "compressed_cache" and saved["backend_kwargs"] == {"codec": "zstd", "level": 3}
    # --resume from the saved config: the backend comes back with no flag
    cfg = os.path.join(out, "checkpoints", "000003", "pretrained_model", "train_config.json")
    rc, log = lerobot_train(root, out, f"--config_path={cfg}", "--resume=true", steps=5)
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: compressed_cache" in log
    assert saved_dataset_config(out, 5)["backend"] == "compressed_cache"


def readme_quickstart(root, tmp_path, drop=()) -> list[str]:
    """The README's LeRobot quickstart command, word for word but for its placeholders: the dataset's repo id and
    root, a cache directory, and ``...`` ("your other flags") as a 2-step CPU run of a small ACT, offline; ``drop``:
    words left out."""
    words = first_command(section("Quickstart: LeRobot"))
    assert words[0] == "lerobot-train" and words.count("...") == 1, words
    your_flags = [
        "--policy.pretrained_backbone_weights=null",  # offline (the README says so)
        "--policy.device=cpu",
        "--policy.dim_model=32",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=64",
        "--policy.chunk_size=10",
        "--policy.n_action_steps=10",
        "--steps=2",
        "--batch_size=2",
        "--num_workers=0",
        "--save_freq=2",
        "--log_freq=1",
        "--wandb.enable=false",
        f"--output_dir={tmp_path / 'run'}",
    ]
    placeholders = {
        "you/your_dataset": REPO,
        "/data/your_dataset": str(root),
        "/scratch/robo-loaders-cache": str(tmp_path / "cache"),
    }
    args = [os.path.join(BIN, "lerobot-train")]
    for word in words[1:]:
        if word == "...":
            args += your_flags
        elif word not in drop:
            for placeholder, value in placeholders.items():
                word = word.replace(placeholder, value)
            args.append(word)
    return args


def test_the_readmes_lerobot_quickstart_trains_as_written(root, tmp_path):
    """Issue 42 item 15: the README's command could not run on LeRobot 0.6.1 (it needs --policy.push_to_hub=false
    or a policy repo id). Taken from the README as it is, placeholders filled in, it trains on the backend it
    names, with its cache_dir. The control (the same command without that flag fails): the next test."""
    rc, log = run(readme_quickstart(root, tmp_path))
    assert rc == 0, log[-3000:]
    assert f"[robo-loaders] lerobot data backend: compressed_cache [{REPO}]" in log and str(tmp_path / "cache") in log
    assert saved_dataset_config(str(tmp_path / "run"), 2)["backend_kwargs"] == {"cache_dir": str(tmp_path / "cache")}


def test_lerobots_own_refusal_reads_as_lerobots(root, tmp_path):
    """The quickstart without --policy.push_to_hub=false: LeRobot refuses it itself, and its traceback went through
    the plugin's ``lerobot/compat.py`` (the wrapper around ``train``), so it looked like the plugin's. Now no frame
    of the plugin is printed: LeRobot's traceback, LeRobot's message, its exit status."""
    rc, log = run(readme_quickstart(root, tmp_path, drop=("--policy.push_to_hub=false",)))
    assert rc == 1, log[-3000:]
    assert log.rstrip().endswith(
        "ValueError: 'repo_id' argument missing. Please specify it to push the model to the hub."
    )
    frames = re.findall(r'^  File "([^"]+)"', log, re.M)
    assert frames and not [f for f in frames if "robo_loaders_plugin" in f], frames


def test_without_flag_lerobot_is_unchanged(root, tmp_path):
    out = str(tmp_path / "native")
    rc, log = lerobot_train(root, out)
    assert rc == 0, log[-3000:]
    assert "[robo-loaders]" not in log
    assert saved_dataset_config(out, 3)["backend"] == "native"
    rc, log = lerobot_train(root, str(tmp_path / "explicit"), "--dataset.backend=native")
    assert rc == 0 and "[robo-loaders]" not in log, log[-3000:]


def test_eval_split_serves_both_splits(root, tmp_path):
    rc, log = lerobot_train(
        root, str(tmp_path / "split"), "--dataset.backend=compressed_cache", "--dataset.eval_split=0.4"
    )
    assert rc == 0, log[-3000:]
    lines = [line for line in log.splitlines() if "lerobot data backend: compressed_cache" in line]
    assert len(lines) == 2, lines  # the train and eval datasets, not the unsplit one


def test_datapipe_evaluates_from_spawned_workers(root, tmp_path):
    """Issue 42 item 7: the evaluation loader spawns its workers (``--num_workers=1``) with the datapipe dataset
    pickled into them; its episode loader was a closure (``Can't pickle local object
    'datapipe_dataset.<locals>.read'``), so the run trained a step and died at its first evaluation (rc 1). Every
    backend's dataset in such a worker: test_spawned_workers.py."""
    rc, log = lerobot_train(
        root,
        str(tmp_path / "eval"),
        "--dataset.backend=datapipe",
        "--dataset.eval_split=0.5",
        "--eval_steps=2",
        steps=2,
    )
    assert rc == 0, log[-3000:]
    assert "step 2: eval_loss=" in log, log[-3000:]


def test_hook_disabled_flag_unknown_then_discover_packages_path(root, tmp_path):
    off = {"ROBO_LOADERS_DISABLE": "1"}
    rc, log = lerobot_train(root, str(tmp_path / "off"), "--dataset.backend=compressed_cache", env_extra=off)
    assert rc != 0 and "backend" in log, log[-2000:]
    rc, log = lerobot_train(
        root,
        str(tmp_path / "discover"),
        "--dataset.backend=compressed_cache",
        "--dataset.discover_packages_path=robo_loaders_plugin",
        env_extra=off,
    )
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: compressed_cache" in log
    # malformed JSON on this route: one line, as on the hook's (a ~55-line YAML traceback before; a reviewer's)
    rc, log = lerobot_train(
        root,
        str(tmp_path / "discover_bad"),
        "--dataset.backend=compressed_cache",
        '--dataset.backend_kwargs={"codec": "zstd", "level": 3',
        "--dataset.discover_packages_path=robo_loaders_plugin",
        env_extra=off,
    )
    assert rc == 1 and "error: --dataset.backend_kwargs must be a JSON object" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_unknown_backend_fails_at_parse_time(root, tmp_path):
    rc, log = lerobot_train(root, str(tmp_path / "typo"), "--dataset.backend=compresed_cache")
    assert rc == 1, log[-2000:]
    assert "unknown data backend 'compresed_cache'" in log and "compressed_cache" in log and "native" in log
    assert "Creating dataset" not in log
    # the line docs/lerobot.md quotes is the line printed ("..." in the quote stands for the rest)
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "lerobot.md")) as f:
        doc = f.read()
    quote = " ".join(re.search(r"`(error: --dataset\.backend:[^`]*)`", doc).group(1).split())
    line = next(ln for ln in log.splitlines() if ln.startswith("error: --dataset.backend:"))
    assert re.fullmatch(".*".join(re.escape(p.strip()) for p in quote.split("...")) + ".*", line), (quote, line)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            '{"codek": "zstd"}',
            "--dataset.backend_kwargs: unknown option 'codek' for backend 'compressed_cache' (did you mean 'codec'?)",
        ),
        ('{"level": 42}', "--dataset.backend_kwargs.level must be 0..9, got 42 (backend 'compressed_cache')"),
        ("{codec: zstd}", "--dataset.backend_kwargs must be a JSON object, e.g. --dataset.backend_kwargs="),  # YAML
        ('{"codec": "zstd"', "--dataset.backend_kwargs must be a JSON object"),  # malformed
        ("zstd", "--dataset.backend_kwargs must be a JSON object"),  # a plain string
    ],
)
def test_bad_backend_kwargs_fail_at_parse_time(root, tmp_path, kwargs, message):
    """Every bad option name or value, and anything but a JSON object, is one line naming the flag (once), before
    LeRobot reads any data; no traceback."""
    rc, log = lerobot_train(
        root, str(tmp_path / "kw"), "--dataset.backend=compressed_cache", f"--dataset.backend_kwargs={kwargs}"
    )
    assert rc == 1 and message in log, log[-2000:]
    assert "Creating dataset" not in log and "Traceback" not in log, log[-3000:]
    error_lines = [ln for ln in log.splitlines() if "--dataset.backend_kwargs" in ln]
    assert len(error_lines) == 1 and "`dataset.backend_kwargs`" not in error_lines[0], error_lines  # named once


def test_datapipe_feeds_the_training_loop_and_resumes(root, tmp_path):
    """Converted on first use into cache_dir; the loop's batches come from the pipeline (the cycle patch), and
    --resume continues at the sampler's offset (step 3 x batch 4 -> batch 3 of epoch 0)."""
    out, cache = str(tmp_path / "dp"), str(tmp_path / "shards")
    rc, log = lerobot_train(
        root, out, "--dataset.backend=datapipe", f'--dataset.backend_kwargs={{"cache_dir": "{cache}"}}'
    )
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: datapipe" in log and "starting at epoch 0 batch 0" in log, log[-3000:]
    assert f"convert {os.path.basename(root)}" in log  # converted on first use (progress bar)
    cfg = os.path.join(out, "checkpoints", "000003", "pretrained_model", "train_config.json")
    rc, log = lerobot_train(root, out, f"--config_path={cfg}", "--resume=true", steps=5)
    assert rc == 0, log[-3000:]
    assert "starting at epoch 0 batch 3" in log, log[-3000:]
    assert f"convert {os.path.basename(root)}" not in log  # the shards in cache_dir are reused


def test_datapipe_through_discover_packages_path(root, tmp_path):
    rc, log = lerobot_train(
        root,
        str(tmp_path / "dp_discover"),
        "--dataset.backend=datapipe",
        f'--dataset.backend_kwargs={{"cache_dir": "{tmp_path / "shards"}"}}',
        "--dataset.discover_packages_path=robo_loaders_plugin",
        env_extra={"ROBO_LOADERS_DISABLE": "1"},
    )
    assert rc == 0, log[-3000:]
    assert "batches come from the torchdata pipeline" in log, log[-3000:]


def test_gpu_resampler_trains_at_another_rate_and_resumes(root, tmp_path):
    out = str(tmp_path / "gr")
    rc, log = lerobot_train(root, out, "--dataset.backend=gpu_resampler", '--dataset.backend_kwargs={"target_fps": 10}')
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: gpu_resampler" in log and "windows at 10 Hz on 20 Hz data" in log, log[-3000:]
    cfg = os.path.join(out, "checkpoints", "000003", "pretrained_model", "train_config.json")
    rc, log = lerobot_train(root, out, f"--config_path={cfg}", "--resume=true", steps=5)
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: gpu_resampler" in log and saved_dataset_config(out, 5)["backend_kwargs"] == {
        "target_fps": 10
    }


def test_backend_kwargs_are_json_numbers_and_empty_means_none(root, tmp_path):
    """Issue 30 item 5: LeRobot's parser reads the flag as YAML, where 1e1 and 2e9 are strings ("must be a number,
    got str '1e1'", "expected a size like 2GB"); an empty value was an AttributeError inside LeRobot's parser. The
    flag is read as JSON: numbers in exponent form are numbers, saved as such, and an empty value is no options."""
    out = str(tmp_path / "exp")
    rc, log = lerobot_train(
        root, out, "--dataset.backend=gpu_resampler", '--dataset.backend_kwargs={"target_fps": 1e1, "max_memory": 2e9}'
    )
    assert rc == 0 and "windows at 10 Hz on 20 Hz data" in log, log[-3000:]
    assert saved_dataset_config(out, 3)["backend_kwargs"] == {"target_fps": 10.0, "max_memory": 2e9}
    rc, log = lerobot_train(
        root, str(tmp_path / "empty"), "--dataset.backend=compressed_cache", "--dataset.backend_kwargs="
    )
    assert rc == 0 and "lerobot data backend: compressed_cache" in log, log[-3000:]
    # the same through --dataset.discover_packages_path (the plugin is imported after LeRobot read the command line)
    rc, log = lerobot_train(
        root,
        str(tmp_path / "discover"),
        "--dataset.backend=gpu_resampler",
        '--dataset.backend_kwargs={"target_fps": 1e1}',
        "--dataset.discover_packages_path=robo_loaders_plugin",
        env_extra={"ROBO_LOADERS_DISABLE": "1"},
    )
    assert rc == 0 and "windows at 10 Hz on 20 Hz data" in log, log[-3000:]
    # negative control: a JSON string stays a string, refused at parse time
    rc, log = lerobot_train(
        root, str(tmp_path / "str"), "--dataset.backend=gpu_resampler", '--dataset.backend_kwargs={"target_fps": "1e1"}'
    )
    assert rc == 1 and "--dataset.backend_kwargs.target_fps must be a number, got str '1e1'" in log, log[-3000:]
    assert "Creating dataset" not in log


@pytest.mark.parametrize("discover", [False, True])
def test_a_late_refusal_is_one_line_and_exit_status_1(root, tmp_path, discover):
    """Issue 30 item 6: a refusal once LeRobot built its dataset (delta_timestamps naming a key the dataset does
    not have) printed ~35 lines of traceback before its line. Now that line alone, exit status 1, with the import
    hook and through --dataset.discover_packages_path."""
    extra = ["--dataset.discover_packages_path=robo_loaders_plugin"] if discover else []
    rc, log = lerobot_train(
        root,
        str(tmp_path / "late"),
        "--dataset.backend=gpu_resampler",
        '--dataset.backend_kwargs={"delta_timestamps": {"nope": [-5e-2, 0]}}',
        *extra,
        env_extra={"ROBO_LOADERS_DISABLE": "1"} if discover else None,
    )
    assert rc == 1, log[-3000:]
    assert "Creating dataset" in log  # late: after LeRobot's parser accepted the options
    lines = [ln for ln in log.splitlines() if "nope" in ln and "delta_timestamps" in ln and "{" not in ln]
    assert len(lines) == 1 and lines[0].startswith(
        f"error: --dataset.backend_kwargs.delta_timestamps names ['nope'], which {REPO} does not have"
    ), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize(
    "backend, kwargs, message",
    [
        (
            "compressed_cache",
            {"cache_dir": "/proc/nope"},
            "--dataset.backend_kwargs.cache_dir must be a directory you can "
            "write to: cannot create '/proc/nope' (No such file or "
            "directory)",
        ),
        (
            "datapipe",
            {"shards": "/nonexistent/shards"},
            "--dataset.backend_kwargs.shards must be a directory 'robo-loaders "
            "convert' wrote (left out, the dataset is converted on first use "
            "into the cache directory): '/nonexistent/shards' does not exist",
        ),
    ],
)
def test_bad_paths_fail_at_parse_time(root, tmp_path, backend, kwargs, message):
    """Issue 30 item 12: an unwritable cache_dir (~25 lines ending in CacheError) and shards that do not exist
    (blamed on "an interrupted conversion") were met after the dataset loaded. Now one line at argument parsing."""
    rc, log = lerobot_train(
        root, str(tmp_path / "p"), f"--dataset.backend={backend}", f"--dataset.backend_kwargs={json.dumps(kwargs)}"
    )
    assert rc == 1 and message in log, log[-3000:]
    assert "Creating dataset" not in log and "Traceback" not in log and "interrupted" not in log, log[-3000:]


@pytest.mark.parametrize("case", ["empty root", "missing root", "episodes", "a component with 0 episodes"])
def test_a_dataset_lerobot_cannot_train_from_is_one_line_at_parse_time(root, lerobot_zero_episodes, tmp_path, case):
    """Issue 42 items 11 and 14: an empty --dataset.root (native), one that does not exist (compressed_cache: 223
    lines), --dataset.episodes=[0,7] on 5 episodes, a mixture component with 0 episodes: a ~70-220-line traceback
    ending in OfflineModeIsEnabled ... huggingface.co. Now one line naming the flag, the path and what is missing,
    exit status 1, before LeRobot reads the dataset. Controls: the same root trains
    (test_without_flag_lerobot_is_unchanged); the Hub-on and in-range counterparts
    (test_lerobot_errors_and_api.py::test_a_root_or_episodes_lerobot_cannot_train_from_is_refused_at_parsing)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    component = json.dumps([{"repo_id": "zero/x", "root": str(lerobot_zero_episodes), "weight": 1}])
    args, line = {
        "empty root": ((empty,), f"error: --dataset.root={empty} holds no LeRobot dataset (no meta/info.json)"),
        "missing root": (
            (tmp_path / "nope", "--dataset.backend=compressed_cache"),
            f"error: --dataset.root={tmp_path / 'nope'} does not exist and the Hugging Face Hub is off",
        ),
        "episodes": (
            (root, "--dataset.backend=compressed_cache", "--dataset.episodes=[0,7]"),
            f"error: --dataset.episodes: episode 7 of [0, 7] is not in {root}, which has 5 episodes",
        ),
        "a component with 0 episodes": (
            (None, f"--dataset.mixture={component}"),
            f"error: --dataset.mixture: component 0 (zero/x): root {lerobot_zero_episodes}: zero/x has 0 episodes",
        ),
    }[case]
    rc, log = lerobot_train(args[0], str(tmp_path / "out"), *args[1:], repo=None if args[0] is None else REPO)
    assert rc == 1, log[-3000:]
    errors = [ln for ln in log.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(line), log[-3000:]
    assert "Traceback" not in log and "Creating dataset" not in log and "huggingface.co" not in log, log[-3000:]


def test_native_refuses_backend_kwargs_at_parse_time(root, tmp_path):
    """Issue 42 item 16: --dataset.backend=native with --dataset.backend_kwargs trained, the option ignored and saved
    in train_config.json. Refused at parse time now, as every backend refuses an option it does not take (control:
    test_bad_backend_kwargs_fail_at_parse_time; native without options trains: test_without_flag_lerobot_is_unchanged;
    a resumed run: test_lerobot_errors_and_api.py::test_native_refuses_options_at_parsing_and_a_resumed_run_...)."""
    out = tmp_path / "native"
    rc, log = lerobot_train(root, str(out), "--dataset.backend=native", '--dataset.backend_kwargs={"codec": "zstd"}')
    assert rc == 1, log[-3000:]
    assert "error: --dataset.backend_kwargs: unknown option 'codec' for backend 'native'; valid options: (none)" in log
    assert "Creating dataset" not in log and "Traceback" not in log and not out.exists(), log[-3000:]


def test_compressed_cache_builds_batches_in_threads_unless_image_transforms_draw_in_workers(root, tmp_path):
    """compressed_cache on LeRobot (issue 45: no spawned workers to wait for at the first batch, no worker hand-off
    per batch): by default lerobot-train's batches are built by threads in the training process and it trains;
    with image transforms enabled the default ``loader`` is ``dataloader``, whose workers draw the transforms from
    their RNG as LeRobot's do. With ``loader: threads`` given, image transforms are refused in one line: threads
    drew them from the training process's RNG in no fixed order (a reviewer's reproduction: other augmentations at
    every run of the same seed)."""
    built = "compressed_cache: lerobot-train's batches are built in the training process"
    rc, log = lerobot_train(root, str(tmp_path / "default"), "--dataset.backend=compressed_cache", steps=2)
    assert rc == 0 and re.search(r"step:2 .*loss:", log) and built in log, log[-3000:]
    transforms = "--dataset.image_transforms.enable=true"
    rc, log = lerobot_train(root, str(tmp_path / "tf"), "--dataset.backend=compressed_cache", transforms, steps=1)
    assert rc == 0 and re.search(r"step:1 .*loss:", log) and built not in log, log[-3000:]
    rc, log = lerobot_train(
        root,
        str(tmp_path / "tf_threads"),
        "--dataset.backend=compressed_cache",
        '--dataset.backend_kwargs={"loader": "threads"}',
        transforms,
        steps=1,
    )
    refused = "compressed_cache (loader='threads') builds batches in the training process, where LeRobot's image"
    assert rc == 1 and refused in log and "Traceback" not in log, log[-3000:]


def test_python_dash_m_is_patched_as_the_console_script(root, tmp_path):
    """``python -m lerobot.scripts.lerobot_train`` (the form LeRobot's docs print) runs the script as ``__main__``,
    which the import hook never saw: the log named the backend, but the loop's batches were LeRobot's (datapipe's
    pipeline unused, a mixture's weights ignored), no component statistics were saved and a late refusal was a
    traceback (a reviewer's reproduction). Now as the console script: the pipeline's line, the checkpoint's
    component_stats.json, a late refusal in one line. Control: the console script, the tests above."""
    out = tmp_path / "m"
    component = json.dumps(
        [
            {"repo_id": REPO, "root": str(root), "weight": 1, "episodes": [0, 1, 2]},
            {"repo_id": "b/b", "root": str(root), "weight": 3, "episodes": [3, 4]},
        ]
    )
    rc, log = lerobot_train(
        None, str(out), "--dataset.backend=datapipe", f"--dataset.mixture={component}", repo=None, as_module=True
    )
    assert rc == 0, log[-3000:]
    assert "datapipe: lerobot-train's batches come from mixture of 2" in log, log[-3000:]
    assert (out / "checkpoints" / "000003" / "pretrained_model" / "component_stats.json").exists()
    rc, log = lerobot_train(
        root,
        str(tmp_path / "late"),
        "--dataset.backend=gpu_resampler",
        '--dataset.backend_kwargs={"delta_timestamps": {"nope": [-5e-2, 0]}}',
        as_module=True,
    )
    assert rc == 1 and "Traceback" not in log, log[-3000:]
    assert [ln for ln in log.splitlines() if ln.startswith("error: --dataset.backend_kwargs.delta_timestamps")]
