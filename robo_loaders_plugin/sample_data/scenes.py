"""Procedurally drawn camera frames that move smoothly, so they compress like simulator renders.

Random noise would be incompressible and make every codec look bad; flat colour would make them look too good.
Each camera sees a shaded table with a fixed texture, a cube and a gripper moving along smooth trajectories,
with soft edges and lighting gradients, which is roughly what robosuite's 84x84 renders contain.
"""

from __future__ import annotations

import numpy as np


class SceneRenderer:
    """One camera of one episode drawn like a simulator render: ``render(cube_xy, grip_xy, grip_open)`` ->
    (H, W, 3) uint8.

    Args:
        size: The frames' side in pixels, or (height, width).
        camera: Which camera (changes the lighting and the view).
        rng: The random generator of this camera (tint, texture, cube colour and view are drawn from it once).
    """

    def __init__(self, size, camera: int, rng: np.random.Generator):
        h, w = (size, size) if np.isscalar(size) else size
        self.size = max(h, w)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        yy, xx = yy / max(h - 1, 1), xx / max(w - 1, 1)
        self.yy, self.xx = yy, xx
        tint = rng.uniform(0.6, 1.0, size=3).astype(np.float32)
        light = 0.55 + 0.35 * (1 - yy) + 0.1 * np.cos(3.0 * xx + camera)
        texture = rng.normal(0.0, 0.04, size=(h // 4 + 1, w // 4 + 1)).astype(np.float32)
        texture = np.kron(texture, np.ones((4, 4), np.float32))[:h, :w]
        base = (light + texture)[..., None] * tint[None, None, :] * 170.0
        self.background = base
        self.cube_color = np.array([200, 40, 40], np.float32) * rng.uniform(0.8, 1.0)
        self.gripper_color = np.array([60, 60, 70], np.float32)
        self.view = rng.uniform(-0.15, 0.15, size=2).astype(np.float32) + 0.1 * camera

    def _blob(self, cx, cy, r, square=False):
        if square:
            d = np.maximum(np.abs(self.xx - cx), np.abs(self.yy - cy))
        else:
            d = np.hypot(self.xx - cx, self.yy - cy)
        return np.clip((r - d) * self.size / 1.5, 0.0, 1.0)[..., None]  # soft edge ~1.5 px

    def render(self, cube_xy, grip_xy, grip_open) -> np.ndarray:
        """One frame: the shaded, textured table with the cube and the gripper's two fingers, soft-edged.

        Args:
            cube_xy: The cube's centre (x, y), in fractions of the frame.
            grip_xy: The gripper's centre (x, y), in fractions of the frame.
            grip_open: How open the gripper is (0: closed, 1: open): the fingers' spread.

        Returns:
            (H, W, 3) uint8.
        """
        img = self.background.copy()
        cx, cy = cube_xy + self.view
        m = self._blob(cx, cy, 0.09, square=True)
        shade = 0.85 + 0.15 * (self.xx[..., None] - cx)
        img = img * (1 - m) + m * self.cube_color * shade
        gx, gy = grip_xy + self.view
        for side in (-1, 1):
            g = self._blob(gx + side * (0.03 + 0.05 * grip_open), gy, 0.035)
            img = img * (1 - g) + g * self.gripper_color
        return np.clip(img, 0, 255).astype(np.uint8)
