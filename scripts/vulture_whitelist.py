"""The names vulture (``make lint``) must not report as dead code: each is used, but not through a Python name
vulture can see in the package. Nothing else belongs here: a name nothing uses is deleted, not listed.

Each line below the imports is a use of a name. ``tests/test_dead_code.py`` executes this file, so a listed name
that no longer exists fails there (a stale entry would hide the name's next, dead, definition from vulture). Click
commands and ``atexit`` handlers are not listed: ``[tool.vulture] ignore_decorators`` covers them.
"""

# ruff: noqa: B018  # each bare name or attribute is a use of that name, for vulture

from types import SimpleNamespace

import robo_loaders_plugin
from robo_loaders_plugin import _autopatch, extend, testing
from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore
from robo_loaders_plugin.backends.compressed_cache.store import CompressedStore
from robo_loaders_plugin.backends.datapipe import lerobot as datapipe
from robo_loaders_plugin.backends.gpu_resampler import lerobot as gpu_resampler
from robo_loaders_plugin.backends.video_stream import lerobot as video_stream
from robo_loaders_plugin.cli import _LazyGroup
from robo_loaders_plugin.core import sched
from robo_loaders_plugin.core.iteration import BatchDataset, BatchSource
from robo_loaders_plugin.lerobot import mixture_meta
from robo_loaders_plugin.pipeline.plan import BatchPlanNode
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.sources.lerobot_v3 import EpisodeVideoDecoder, LeRobotV3
from robo_loaders_plugin.sources.remote_blocks import BlockFile
from robo_loaders_plugin.storage.shards.executors import Submitted

# -- referenced by a string ---------------------------------------------------------------------------------------
# the built-in backends' factories and footprints: "module:function" strings in their BackendSpec
# (backends/*/__init__.py; each robomimic.py defines the same names)
datapipe.datapipe_dataset
datapipe.datapipe_footprint
gpu_resampler.gpu_resampler_dataset
gpu_resampler.gpu_resampler_footprint
video_stream.video_stream_dataset
video_stream.video_stream_footprint
# a frame store: the "module:Class" string of its frame_backend (backends/compressed_cache/__init__.py)
CompressedStore
# the start-up hook: robo_loaders_plugin_autopatch.pth calls _autopatch.arm()
_autopatch.arm
# the fields Submitted.as_dict() gives for --json, read by key (res["pending_units"])
_submitted = SimpleNamespace(**Submitted.__dataclass_fields__)
_submitted.pending_units
_submitted.launch_script

# -- called by Python, torch, torchdata or a framework, by name -------------------------------------------------------
robo_loaders_plugin.__getattr__  # module __getattr__/__dir__ (PEP 562): the lazy names
extend.__getattr__
extend.__dir__
BatchSource.load_state_dict  # torch's Stateful protocol (state_dict / load_state_dict): resuming a pass
BatchDataset.get_dataset_sampler  # robomimic's train() asks its dataset for a sampler
BatchPlanNode.get_state  # torchdata's BaseNode protocol
RobomimicSamples.total_num_sequences  # SequenceDataset's attributes robomimic's train() reads
RobomimicSamples.get_obs_normalization_stats
BlockFile.readable  # io.RawIOBase's protocol: the decoders read the file through io
BlockFile.seekable

# -- attributes the package sets on other libraries' objects, which those libraries read -----------------------------
_foreign = SimpleNamespace(
    # robomimic's config (train.data_backend, ..., observation.modalities.obs.low_dim) and train_utils.input
    data_backend=0,
    data_backend_kwargs=0,
    data_mixture=0,
    low_dim=0,
    input=0,
    # PyAV's codec contexts and frames (storage/video.py, tools/transcode.py)
    gop_size=0,
    thread_count=0,
    thread_type=0,
    pict_type=0,
    # LeRobot's module-level video decoder cache, replaced in a native mixture's worker (lerobot/compat.py)
    _default_decoder_cache=0,
)
_foreign.data_backend
_foreign.data_backend_kwargs
_foreign.data_mixture
_foreign.low_dim
_foreign.input
_foreign.gop_size
_foreign.thread_count
_foreign._default_decoder_cache
_foreign.thread_type
_foreign.pict_type
_autopatch.__doc__  # set on a module object (_autopatch's empty macros module)
_LazyGroup.command_class  # click.Group's class attributes: the classes its command() and group() decorators make
_LazyGroup.group_class

# -- updated in place through a view (sample_data/camera.py: region *= ...; the array it views is the output) --------
region = None
region

# -- the public API: for users and third-party backends, called by tests and benchmarks, not by the package ----------
testing.robomimic_case
testing.lerobot_case
testing.reset_plugins
testing.assert_same_samples
testing.assert_same_batches
testing.assert_same_pass
extend.robomimic_sequence  # the SDK's services for hand-written factories (docs/writing-a-backend.md)
extend.robomimic_demo_fields
extend.lerobot_episodes
sched.back_to_normal  # the test suite's safety net after LeRobot's writer encoded AV1 in its own thread (conftest.py)
mixture_meta.component_metas  # every component read by LeRobot: the reference the mixture index is tested and
# benchmarked against (benchmarks/mixture_index.py's 'before')
EpisodeStore.blob_bounds  # every blob located and its size checked, as a reader does before its first decode
LeRobotV3.remote_bytes_read  # what a pass cost, read by users (and tests, benchmarks)
EpisodeVideoDecoder.fallbacks
_counters = SimpleNamespace(downloads=0, allocations=0)  # FileCache.downloads, BufferPool.allocations: set in
_counters.downloads  # __init__, so not class attributes
_counters.allocations
_datasets_dataset = SimpleNamespace(_indexes={})  # compat.ParquetReads.dataset: a copied datasets.Dataset's own
_datasets_dataset._indexes  # search indexes, read by the datasets library
