"""The registration: one backend, ``jpeg_frames``, for robomimic and LeRobot, served from :class:`JpegStore`.
Cheap to import (listing backends imports neither the store nor torch): the store is a ``"module:Class"`` string."""

from robo_loaders_plugin.extend import LOSSY_FRAMES, Option, frame_backend, hookimpl


@hookimpl
def robo_loaders_backends():
    return [
        frame_backend(
            "jpeg_frames",
            "robo_loaders_jpeg.store:JpegStore",
            description="camera frames stored as JPEG at a chosen quality in the cache directory (lossy, "
            "PSNR-checked), "
            "every other field byte-identical; frames decoded per batch",
            lossless=LOSSY_FRAMES,
            options={
                "quality": Option(
                    int,
                    90,
                    "JPEG quality of the stored camera frames (higher: closer to the source, larger)",
                    min=1,
                    max=100,
                )
            },
        )
    ]
