"""Options are converted once, when they are resolved, and what the user gave is recorded, not guessed.

Why: ``max_memory`` was checked at parse time, the result thrown away and parsed again by each reader; and
"given" was decided by comparing with the default, so a user passing ``shuffle_buffer`` at its default value could
have it made smaller (a buffer the user did not set may be shrunk to fit the episode cache; one they set is kept).
"""

import numpy as np

from robo_loaders_plugin.core.registry import choose_backend
from robo_loaders_plugin.pipeline.buffer_plan import buffer_plan
from robo_loaders_plugin.pipeline.options import PassOptions


def choose(framework, backend, given):
    return choose_backend(framework, backend, given, name_where="backend", options_where="kwargs")


def test_sizes_are_bytes_once_resolved():
    opts = choose("robomimic", "gpu_resampler", {"max_memory": "2GB", "max_device_memory": 1.5e9}).options
    assert (opts.max_memory, opts.max_device_memory) == (2_000_000_000, 1_500_000_000)
    assert type(opts.max_memory) is int and opts.given() == {
        "max_memory": 2_000_000_000,
        "max_device_memory": 1_500_000_000,
    }
    assert choose("lerobot", "datapipe", {"cache_memory": "512MiB"}).options.cache_memory == 512 << 20
    assert choose("lerobot", "datapipe", {}).options.cache_memory is None  # not given: the backend's default


def test_an_option_given_at_its_default_value_counts_as_given():
    default = choose("lerobot", "datapipe", {}).options
    explicit = choose("lerobot", "datapipe", {"shuffle_buffer": default.shuffle_buffer}).options
    assert default.shuffle_buffer == explicit.shuffle_buffer == 64
    assert default.given() == {} and explicit.given() == {"shuffle_buffer": 64}
    assert not PassOptions.of(default).shuffle_given and PassOptions.of(explicit).shuffle_given
    # a cache of 40 units: the buffer left to the backend is halved to fit, the one the user set is kept
    units = np.full(1000, 25 * 10**6)
    for opts, kept in ((default, 20), (explicit, 64)):
        passes = PassOptions.of(opts)
        plan = buffer_plan(
            units,
            cache_memory=10**9,
            cache_episodes=None,
            shuffle_buffer=passes.shuffle_buffer,
            shuffle_given=passes.shuffle_given,
            batch_bytes=0,
            prefetch=2,
            option_prefix="kwargs",
            unit="episodes",
        )
        assert plan.shuffle_buffer == kept, (opts.given(), plan)


def test_a_default_that_moves_random_draws_yields_where_items_draw_them():
    """``compressed_cache``'s ``loader`` defaults to ``threads`` (batches built in the training process), but where
    LeRobot's items draw random numbers (image transforms) to ``dataloader``, whose workers draw them as LeRobot's
    do (``Option.random_items_defaults``, applied by ``BackendChoice.for_items``); a value the user gave is kept.
    Control: the same choice for items drawing nothing keeps ``threads``, and robomimic declares no such default."""
    from robo_loaders_plugin.core.spec import INDEXED, SAMPLE

    plain = choose("lerobot", "compressed_cache", {"codec": "zstd"})
    assert plain.options.loader == "threads" and plain.kind == INDEXED
    assert plain.for_items(draw_random=False) is plain  # control: nothing drawn, nothing changes
    drawn = plain.for_items(draw_random=True)
    assert drawn.options.loader == "dataloader" and drawn.kind == SAMPLE
    assert drawn.options.codec == "zstd" and drawn.options.given() == {"codec": "zstd"}  # the rest unchanged
    given = choose("lerobot", "compressed_cache", {"loader": "threads"})
    assert given.for_items(draw_random=True).options.loader == "threads"  # given: kept
    mimic = choose("robomimic", "compressed_cache", {})
    assert mimic.for_items(draw_random=True).options.loader == "threads"  # no such default on robomimic
