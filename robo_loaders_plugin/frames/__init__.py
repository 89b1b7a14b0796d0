"""Frame sources: per-episode arrays addressed by (episode, step), whatever holds them, and the one gather."""

from robo_loaders_plugin.frames.base import FieldInfo, FrameSource, gather

__all__ = ["FieldInfo", "FrameSource", "gather"]
