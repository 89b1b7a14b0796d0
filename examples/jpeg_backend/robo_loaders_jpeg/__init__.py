"""robo-loaders-jpeg: an example third-party backend for robo-loaders-plugin, written against its public API only
(``robo_loaders_plugin``, ``robo_loaders_plugin.extend``, ``robo_loaders_plugin.testing``).

Camera frames are stored as JPEG at a chosen ``quality`` in the cache directory (about 10-20x smaller than raw
frames at quality 90 on camera-like images), every other field byte-identical; frames are decoded per batch. The
backend declares itself lossy (``LOSSY_FRAMES``) and its tests check the PSNR it promises.
"""

__version__ = "0.1.0"
