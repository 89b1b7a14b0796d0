"""A robomimic mixture's batches built once over all its components, not once per component (issue 44 item 2).

Why: each component's part of a batch was built by its own dataset (its windows, one read per field), then renamed,
padded, filled and scattered into the mixed batch; with 100 small files a batch touched ~27 components and cost more
than the hand-written ``ConcatDataset`` reading HDF5 in worker processes. Here the components' demos are joined
into one ``SequenceWindows`` (the same options: a window never crosses a demo, so demos of different files can sit
side by side) and their frame sources behind one ``mixtures.joined_frames.JoinedFrames`` that maps each mixture
field (``obs/<key>``, ``next_obs/<key>``, the dataset keys) to the component's own, pads vectors and zero-fills a
camera a component lacks; a batch is robomimic's sample rules applied once (``windows.robomimic.collate``), the
masks and ``_is_missing`` flags computed for all rows at once.

Used when every component is a backend's ``RobomimicSamples`` on the CPU at the recorded rate with the same sequence
options (:meth:`JoinedSamples.joinable`); any other mixture keeps the per-component path, which serves the same
batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.mixtures.joined_frames import JoinedFrames, keep_low_dim_within_budget
from robo_loaders_plugin.mixtures.missing import missing_key
from robo_loaders_plugin.mixtures.padding import Padding, mask_key
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.windows import robomimic as rules

GROUPS = ("obs", "next_obs")  # the frame source's obs fields: ``<group>/<key>`` (goal_obs reads next_obs)


def _same_options(a: rules.SequenceOptions, b: rules.SequenceOptions) -> bool:
    """Whether two components' windows are built alike (their obs keys aside: those are renamed and may lack a
    camera)."""
    return dataclasses.replace(a, obs_keys=()) == dataclasses.replace(b, obs_keys=())


def _ordered(batch: Mapping, template: Mapping) -> dict:
    """``batch``'s values in ``template``'s nesting and key order."""
    return {k: _ordered(batch[k], v) if isinstance(v, Mapping) else batch[k] for k, v in template.items()}


def _structure(batch: Mapping) -> dict:
    """A batch's nested keys (values dropped), to compare two batches' layouts."""
    return {k: _structure(v) if isinstance(v, Mapping) else None for k, v in batch.items()}


class JoinedSamples:
    """A robomimic mixture's batches, built once over all components (module docstring).

    Args:
        datasets: The components' ``RobomimicSamples``.
        renames: Each component's ``{its obs key: mixture obs key}``.
        obs_keys: The mixture's obs keys.
        padding: The mixture's padded vectors (``actions``, low-dim obs keys).
        cameras: The obs keys served as zeros where a component lacks them.
        missing: Per component, the obs keys it lacks.
        template: A per-component batch of the mixture (its nesting and key order are kept).
    """

    def __init__(
        self,
        datasets: Sequence[RobomimicSamples],
        renames: Sequence[Mapping[str, str]],
        obs_keys: Sequence[str],
        padding: Padding,
        cameras: Sequence[str],
        missing: Sequence[Sequence[str]],
        template: Mapping,
    ):
        opts = datasets[0].opts
        self.opts = dataclasses.replace(opts, obs_keys=tuple(obs_keys))
        self.template = _structure(template)
        self.padding = padding
        self.cameras = list(cameras)
        fields = []
        for d, rename in zip(datasets, renames):
            own = {f: f for f in d.opts.dataset_keys}
            for key in d.opts.obs_keys:
                for group in GROUPS:
                    own[f"{group}/{rename.get(key, key)}"] = f"{group}/{key}"
            fields.append(own)
            served = {f"{GROUPS[0]}/{key}" for key in obs_keys if key not in missing[len(fields) - 1]}
            if not served <= set(own):  # JoinedFrames fills what a map lacks with zeros: only missing cameras may
                raise RoboLoadersError(
                    f"robomimic mixture: component {len(fields) - 1} serves none of {sorted(served - set(own))} "
                    "and they are not cameras it lacks (an internal error: please report it)"
                )
        n = len(datasets)
        widths = {}
        for key, size in padding.sizes.items():
            each = ([int(padding.own[k][key]) for k in range(n)], int(size))
            for field in (key, *(f"{group}/{key}" for group in GROUPS)):
                widths[field] = each
        unit_lengths = [d.windows.recorded_lengths for d in datasets]
        self.frames = JoinedFrames([d.frames for d in datasets], unit_lengths, fields, widths)
        self.windows = rules.SequenceWindows(np.concatenate(unit_lengths), self.opts)
        self.own = {key: np.asarray(widths[key][0]) for key in padding.sizes}
        self.lacks = {cam: np.asarray([cam in m for m in missing], dtype=bool) for cam in self.cameras}
        keep_low_dim_within_budget(self.frames, self.opts.field_names())

    @staticmethod
    def joinable(mixture) -> bool:
        """Whether a robomimic mixture's batches can be joined (no sample is read).

        Args:
            mixture: The ``RobomimicMixture``.

        Returns:
            ``False`` where its components need the per-component path: a component is not a ``RobomimicSamples``
            (``native``), serves on a GPU or to one, converts rates, serves parts of demos, or builds its windows
            with other options than the first component.
        """
        datasets = mixture.datasets
        if not datasets or not all(isinstance(d, RobomimicSamples) for d in datasets):
            return False
        for d in datasets:
            on_device = d.device is not None and torch.device(d.device).type != "cpu"
            if d.serving.batch_threads == 0 or on_device or d.windows.rate != 1.0:  # modes: read at rate 1 only
                return False
            if d.sample_units is not None or not _same_options(d.opts, datasets[0].opts):
                return False
        return True

    def collate(self, indices: np.ndarray, comps: np.ndarray, pool=None) -> dict:
        """The mixed batch of these global samples (``MixtureDataset.collate``'s, without ``dataset_index``).

        Args:
            indices: Global sample indices (component ``k``'s sample ``i`` is ``offsets[k] + i``: its windows come
                after the earlier components' in the joined windows).
            comps: Each sample's component.
            pool: Recycles the gathered arrays.

        Returns:
            The batch, in the per-component batch's nesting and key order.
        """
        batch = rules.to_torch(rules.collate(self.frames, self.windows, indices, pool))
        for key, own in self.own.items():
            size = self.padding.sizes[key]
            batch[mask_key(key)] = torch.from_numpy(np.arange(size)[None, :] < own[comps][:, None])
        for cam in self.cameras:
            batch[missing_key(cam)] = torch.from_numpy(self.lacks[cam][comps])
        return _ordered(batch, self.template)
