"""The registration: one backend, ``jpeg_frames``, for robomimic and LeRobot. Cheap to import (listing backends
imports neither this package's code nor a framework): the factories are ``"module:function"`` strings."""
from robo_loaders_plugin import INDEXED, LOSSY_FRAMES, SAMPLE, BackendSpec, Option, hookimpl

OPTIONS = {
    "quality": Option(int, 90, "JPEG quality of the stored camera frames (higher: closer to the source, larger)",
                      min=1, max=100),
    "cache_dir": Option(str, None, "where the JPEG frames are stored (default: $ROBO_LOADERS_CACHE or "
                                   "~/.cache/robo-loaders); reused while the source and quality are unchanged"),
}


@hookimpl
def robo_loaders_backends():
    return [BackendSpec(
        name="jpeg_frames",
        description="camera frames stored as JPEG at a chosen quality in the cache directory (lossy, PSNR-checked), "
                    "every other field byte-identical; frames decoded per batch",
        frameworks=("robomimic", "lerobot"),
        # robomimic: batches built in the training process over its sampler; LeRobot: its DataLoader's workers
        kind={"robomimic": INDEXED, "lerobot": SAMPLE},
        lossless=LOSSY_FRAMES,
        factories={"robomimic": "robo_loaders_jpeg.factories:robomimic_dataset",
                   "lerobot": "robo_loaders_jpeg.factories:lerobot_dataset"},
        options=OPTIONS,
    )]
