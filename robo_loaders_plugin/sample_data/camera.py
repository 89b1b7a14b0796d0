"""Camera-like frames at any resolution: what a real rig's 480p cameras send, for the scale workloads (issue 21).

Why not :class:`~robo_loaders_plugin.sample_data.scenes.SceneRenderer`: its flat shaded table compresses like a
simulator render (LZ4 2.5:1 at 84x84, far more when upscaled), so every lossless store looked several times
smaller than it is on a real camera, and video codecs had nothing to spend bits on. Real camera frames have texture
at every scale, sensor noise that changes every frame, and a camera that moves a little. These frames have:

- **texture**: a background of several octaves of value noise (a 1/f-like spectrum, as natural images have) with
  a few large shapes (a table edge, a wall, a shadow), coloured per camera;
- **motion**: the camera shakes and pans a few pixels along a smooth path (so every pixel changes, as on a
  hand-held or arm-mounted camera), and a textured cube and a gripper move across the scene;
- **sensor noise**: Gaussian noise of ``noise`` grey levels (sigma) drawn fresh for every frame, and a slow
  flicker of the light.

What matters is how the frames compress *after* LeRobot's AV1 (crf 30, GOP 2), since that is what every backend
stores: the defaults (``noise`` 1, clutter grain 3%, fine texture 4x) were chosen so that decoded frames compress
1.7:1 with LZ4HC, what a photographic 480p probe measured (issue 21), and AV1 takes 43x (22 KB per frame); the
first version, with a quarter of the fine texture, gave 3.2:1 and 136x, like a render. The measured ratios, beside
those of the 84x84 renders of ``../shared/data`` upscaled, are in docs/scale.md. Rendering is numpy only, about
2 ms per 480x640 frame.
"""

from __future__ import annotations

import numpy as np

GRAIN = 0.03  # per-pixel texture of the clutter (relative)
FINE = 4.0  # amplitude of the background's finest texture (4- and 2-pixel octaves), relative
MARGIN = 24  # pixels of background around the view, so the camera can shake and pan without running off it


def _smooth_noise(rng, h: int, w: int, cell: int) -> np.ndarray:
    """Value noise: a (h/cell x w/cell) grid of normal values, bilinearly upsampled to (h, w)."""
    gh, gw = h // cell + 2, w // cell + 2
    grid = rng.normal(size=(gh, gw)).astype(np.float32)
    y = np.arange(h, dtype=np.float32) / cell
    x = np.arange(w, dtype=np.float32) / cell
    y0, x0 = y.astype(np.int64), x.astype(np.int64)
    fy, fx = (y - y0)[:, None], (x - x0)[None, :]
    a = grid[y0][:, x0]
    b = grid[y0][:, x0 + 1]
    c = grid[y0 + 1][:, x0]
    d = grid[y0 + 1][:, x0 + 1]
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


class CameraScene:
    """One camera of one episode: ``render(cube_xy, grip_xy, grip_open, t)`` -> (H, W, 3) uint8.

    Args:
        size: (height, width) of the frames.
        camera: Which camera (changes the view, colours and shake).
        rng: The episode's random generator for this camera (frames are a pure function of it and the inputs).
        noise: Sensor noise, sigma in grey levels (0: none, like a render).
        clutter: Sharp-edged objects scattered over the scene (what makes video codecs spend bits).
    """

    def __init__(self, size, camera: int, rng: np.random.Generator, noise: float = 1.0, clutter: int = 40):
        self.h, self.w = (size, size) if np.isscalar(size) else tuple(size)
        h, w = self.h + 2 * MARGIN, self.w + 2 * MARGIN
        scale = max(self.h, self.w)
        tex = np.zeros((h, w), np.float32)
        for octave, amp in (
            (scale // 3, 1.0),
            (scale // 10, 0.55),
            (scale // 30, 0.3),
            (4, 0.18 * FINE),
            (2, 0.1 * FINE),
        ):
            tex += amp * _smooth_noise(rng, h, w, max(2, int(octave)))
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        yy, xx = yy / h, xx / w
        edge = 0.45 + 0.1 * camera + 0.05 * np.sin(6 * xx + camera)  # a table edge: wall above, table below
        table = (yy > edge).astype(np.float32)
        light = 0.75 + 0.25 * np.cos(2.5 * (xx - 0.3 - 0.1 * camera)) * np.cos(1.5 * (yy - 0.4))
        wall, top = rng.uniform(0.5, 0.9, 3).astype(np.float32), rng.uniform(0.35, 0.75, 3).astype(np.float32)
        colour = table[..., None] * top + (1 - table[..., None]) * wall
        base = light[..., None] * colour * (150.0 + 28.0 * tex[..., None] * rng.uniform(0.8, 1.2, 3))
        # clutter: sharp-edged objects on the table and the wall (tools, cables, boxes), each with its own grain
        for _ in range(clutter):
            oh, ow = (int(v) for v in rng.integers(6, max(7, scale // 6), 2))
            y0, x0 = int(rng.integers(0, h - oh)), int(rng.integers(0, w - ow))
            grain = 1 + GRAIN * rng.normal(size=(oh, ow, 1)).astype(np.float32)
            tone = rng.uniform(25, 215) * rng.uniform(0.65, 1.15, 3).astype(np.float32)  # muted colours
            base[y0 : y0 + oh, x0 : x0 + ow] = tone * grain * light[y0 : y0 + oh, x0 : x0 + ow, None]
        self.background = np.clip(base, 0, 255).astype(np.float32)
        self.shake = rng.uniform(0.5, 1.5) * (1 + 0.3 * camera)
        self.phase = rng.uniform(0, 2 * np.pi, 4)
        self.view = rng.uniform(-0.1, 0.1, 2).astype(np.float32) + 0.05 * camera
        self.cube_tex = np.clip(165 + 35 * _smooth_noise(rng, 128, 128, 6)[..., None], 0, 255).astype(np.float32) * (
            np.array([1.0, 0.25, 0.2], np.float32) * rng.uniform(0.85, 1.0)
        )
        self.noise = float(noise)
        # sensor noise: a bank of fields cropped at random offsets (drawing 1M normals per frame costs 20 ms)
        self.bank = (
            (rng.normal(0, 1, (4, self.h + 32, self.w + 32, 3)) * self.noise).astype(np.float32)
            if self.noise > 0
            else None
        )
        self.rng = rng

    def _offset(self, t: float) -> tuple[int, int]:
        """Camera shake and a slow pan, in whole pixels (within MARGIN)."""
        p = self.phase
        dy = self.shake * (2.0 * np.sin(1.7 * t + p[0]) + 1.2 * np.sin(5.3 * t + p[1])) + 6 * np.sin(0.21 * t + p[2])
        dx = self.shake * (2.0 * np.sin(1.3 * t + p[2]) + 1.2 * np.sin(4.1 * t + p[3])) + 9 * np.sin(0.17 * t + p[3])
        lim = MARGIN - 1
        return int(np.clip(round(dy), -lim, lim)), int(np.clip(round(dx), -lim, lim))

    def _paste(self, img, cx: float, cy: float, half: float, texture=None, colour=None, round_: bool = False):
        """Blend a soft-edged square (or disc) centred at (cx, cy) (fractions of the frame) into ``img``."""
        h, w = self.h, self.w
        r = half * max(h, w)
        y0, y1 = max(0, int(cy * h - r - 2)), min(h, int(cy * h + r + 3))
        x0, x1 = max(0, int(cx * w - r - 2)), min(w, int(cx * w + r + 3))
        if y0 >= y1 or x0 >= x1:
            return
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
        dy, dx = yy - cy * h, xx - cx * w
        d = np.hypot(dy, dx) if round_ else np.maximum(np.abs(dy), np.abs(dx))
        m = np.clip((r - d) / 1.5, 0.0, 1.0)[..., None]  # soft edge ~1.5 px
        if texture is not None:
            ty = ((dy + r) / (2 * r) * (texture.shape[0] - 1)).clip(0, texture.shape[0] - 1).astype(np.int64)
            tx = ((dx + r) / (2 * r) * (texture.shape[1] - 1)).clip(0, texture.shape[1] - 1).astype(np.int64)
            value = texture[ty, tx] * (0.85 + 0.15 * (dx / max(r, 1.0)))[..., None]
        else:
            value = colour
        region = img[y0:y1, x0:x1]
        region *= 1 - m
        region += m * value

    def render(self, cube_xy, grip_xy, grip_open: float, t: float) -> np.ndarray:
        """One frame: the background seen through the camera's shake and pan at time ``t``, the light's flicker,
        the textured cube and the gripper's two fingers, then fresh sensor noise.

        Args:
            cube_xy: The cube's centre (x, y), in fractions of the frame.
            grip_xy: The gripper's centre (x, y), in fractions of the frame.
            grip_open: How open the gripper is (0: closed, 1: open): the fingers' spread.
            t: Time in seconds (frame index / fps): drives the shake, pan and flicker.

        Returns:
            (H, W, 3) uint8.
        """
        dy, dx = self._offset(t)
        img = self.background[MARGIN + dy : MARGIN + dy + self.h, MARGIN + dx : MARGIN + dx + self.w].copy()
        img *= np.float32(1.0 + 0.02 * np.sin(2 * np.pi * 0.7 * t + self.phase[0]))  # light flicker
        shift = np.array([dx / self.w, dy / self.h], np.float32)
        cx, cy = np.asarray(cube_xy, np.float32) + self.view - shift
        self._paste(img, cx, cy, 0.06, texture=self.cube_tex)
        gx, gy = np.asarray(grip_xy, np.float32) + self.view - shift
        for side in (-1, 1):
            self._paste(
                img,
                gx + side * (0.025 + 0.04 * grip_open),
                gy,
                0.028,
                colour=np.array([55, 58, 66], np.float32),
                round_=True,
            )
        if self.bank is not None:
            k = int(self.rng.integers(len(self.bank)))
            oy, ox = (int(v) for v in self.rng.integers(0, 32, 2))
            img += self.bank[k, oy : oy + self.h, ox : ox + self.w]
        np.clip(img, 0, 255, out=img)
        return img.astype(np.uint8)
