"""Lossless frame codec shared by every backend that keeps frames compressed (one implementation, many adapters)."""
from robo_loaders_plugin.codecs.frames import FrameCodec, CODEC_CHOICES, DEFAULT_CODEC

__all__ = ["FrameCodec", "CODEC_CHOICES", "DEFAULT_CODEC"]
