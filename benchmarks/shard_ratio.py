"""What a robo-shards conversion actually packed, beside what ``scale_content.py`` sampled (docs/scale.md, L480).

``python benchmarks/shard_ratio.py SHARDS_DIR OUT.json [EPISODES] [FRAMES]``: the lossless ratio of every frames
field as stored (decoded bytes / member bytes, from index.json and the headers: nothing decompressed), then, on
FRAMES frames sampled evenly from EPISODES episodes sampled evenly, each frame decompressed and compressed again
with the conversion's codec as stored (C, H, W) and as ``scale_content.py`` compresses it (H, W, C), plus where in
the episode the frames sit. Why: the L480 conversion packed 1.25:1 where ``scale_content.py``'s sample said 1.76:1,
and the disk estimate of a conversion depends on which is right.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np


def main(shards: str, out: str, episodes: int = 4, frames: int = 12) -> dict:
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.shards import ShardReader
    from robo_loaders_plugin.storage.shards.format import part_member

    reader = ShardReader(shards)
    codec = FrameCodec(**reader.dataset["codec"])
    stored, decoded = {}, {}
    for i, ep in enumerate(reader.episodes):
        header, _ = reader.read_episode(i, fields=[])
        for field, desc in header["fields"].items():
            if desc["kind"] != "frames":
                continue
            parts = desc.get("parts")
            names = (
                [desc["member"]] if parts is None else [part_member(desc["member"], k) for k in range(len(parts) - 1)]
            )
            stored[field] = stored.get(field, 0) + sum(ep["members"][n]["size"] for n in names)
            decoded[field] = decoded.get(field, 0) + math.prod(desc["shape"]) * np.dtype(desc["dtype"]).itemsize
    sampled = {"chw": [0, 0], "hwc": [0, 0]}
    picks = np.linspace(0, len(reader.episodes) - 1, min(episodes, len(reader.episodes))).round().astype(int)
    positions = []
    for i in picks.tolist():
        length = reader.episodes[i]["length"]
        rows = np.linspace(0, length - 1, min(frames, length)).round().astype(int)
        for r in rows.tolist():  # only the parts holding the sampled rows are read
            for enc in reader.read_frame_rows(i, r, r + 1, list(stored)).values():
                positions.append(round(r / max(1, length - 1), 2))
                frame = enc.decode_all()[0]
                hwc = (
                    np.ascontiguousarray(frame.transpose(1, 2, 0))
                    if frame.ndim == 3 and frame.shape[0] in (1, 3)
                    else frame
                )
                for name, f in (("chw", frame), ("hwc", hwc)):
                    sampled[name][0] += f.nbytes
                    sampled[name][1] += len(codec.compress(f))
    result = {
        "shards": shards,
        "codec": codec.as_dict(),
        "stored_ratio": round(sum(decoded.values()) / max(1, sum(stored.values())), 3),
        "stored_ratio_by_field": {k: round(decoded[k] / max(1, stored[k]), 3) for k in sorted(stored)},
        "stored_bytes": sum(stored.values()),
        "decoded_bytes": sum(decoded.values()),
        "sampled_frames": len(positions),
        "sampled_episodes": picks.tolist(),
        "sampled_ratio_chw": round(sampled["chw"][0] / max(1, sampled["chw"][1]), 3),
        "sampled_ratio_hwc": round(sampled["hwc"][0] / max(1, sampled["hwc"][1]), 3),
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:5]))
