"""Shared helpers of the LeRobot integration tests (datasets written with LeRobot's own API, no mocks)."""

import numpy as np
import torch

REPO = "local/sample"


def same_item(ours: dict, theirs: dict, where=""):
    """Same keys in the same order, same dtypes, shapes and values (tensors exactly equal)."""
    assert list(ours) == list(theirs), f"{where}: keys {list(ours)} != {list(theirs)}"
    for k, v in theirs.items():
        o = ours[k]
        if isinstance(v, torch.Tensor):
            assert isinstance(o, torch.Tensor), f"{where}/{k}: {type(o)}"
            assert o.dtype == v.dtype and o.shape == v.shape, (
                f"{where}/{k}: {o.dtype}{tuple(o.shape)} != {v.dtype}{tuple(v.shape)}"
            )
            assert torch.equal(o, v), f"{where}/{k}: values differ"
        else:
            assert o == v, f"{where}/{k}: {o!r} != {v!r}"


def random_indices(n, count=500, seed=0):
    return np.random.default_rng(seed).choice(n, size=count, replace=count > n).tolist()


def serve(backend: str, native, **options):
    """``native`` served through ``backend`` with ``options``, as ``lerobot-train --dataset.backend=BACKEND
    --dataset.backend_kwargs=JSON`` does: options checked, dataset built and recorded for the adapter."""
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose

    return build_dataset(native, choose(backend, **options))


def cfg_for(root, backend=None, backend_kwargs=None, eval_split=0.0, *extra, repo=REPO):
    """A TrainPipelineConfig as lerobot-train builds it (through draccus), for the library entry points (``root``
    ``None``: no ``--dataset.root``; ``extra``: more flags)."""
    import draccus
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.policies.act.configuration_act import ACTConfig  # noqa: F401  (registers --policy.type=act)

    args = [
        f"--dataset.repo_id={repo}",
        *([f"--dataset.root={root}"] if root is not None else []),
        "--policy.type=act",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        f"--dataset.eval_split={eval_split}",
    ]
    if backend:
        args.append(f"--dataset.backend={backend}")
    if backend_kwargs is not None:
        args.append(f"--dataset.backend_kwargs={backend_kwargs}")
    return draccus.parse(TrainPipelineConfig, args=[*args, *extra])


def drop_a_frame(video: str, fps: float, missing: int = 10, append_last: bool = False) -> None:
    """Re-encode ``video`` (H.264) without its frame ``missing``, the later frames keeping their times: a video with
    a gap, as a recorder that dropped a frame writes it. ``append_last``: the last frame once more at the end, so
    that the last rows still decode."""
    import fractions
    import os

    import av

    with av.open(video) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    with av.open(video + ".tmp.mp4", "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        stream.codec_context.time_base = fractions.Fraction(1, fps)
        for i, f in enumerate([*frames, frames[-1]] if append_last else frames):
            if i != missing:
                frame = av.VideoFrame.from_ndarray(f, format="rgb24")
                frame.pts, frame.time_base = i, fractions.Fraction(1, fps)
                for packet in stream.encode(frame):
                    out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    os.replace(video + ".tmp.mp4", video)
