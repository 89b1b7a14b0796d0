"""robomimic training on a weighted mixture of HDF5 files (``train.data_mixture``), on every backend.

Why here and not in robomimic: robomimic 0.3.0 trains on one file (``train.data``). Each component is built by the
chosen backend exactly as ``train.data`` alone would be (robomimic's own ``SequenceDataset`` for ``native``), then
served as one ``batch``-kind dataset (``mixtures.dataset``): its passes follow the mixture's weights, its obs keys
are renamed to the mixture's, every sample carries ``dataset_index``. ``train.data`` stays the first component, so
robomimic's env-metadata and shape reads (``FileUtils``) work unchanged, and its unmodified training script trains
on the mixture. Everything that can be checked from the files' metadata is checked before any data is read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import numpy as np
import torch

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.log import get_logger, warn_once
from robo_loaders_plugin.core.ranks import check_ranks_agree, resolve_ranks, source_identity
from robo_loaders_plugin.core.registry import choose_backend, rate_converting_backends
from robo_loaders_plugin.core.spec import BATCH, BackendChoice
from robo_loaders_plugin.core.units import NAMED_IN_A_LINE, some_of
from robo_loaders_plugin.mixtures.component_lines import ComponentLines
from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX, MixtureDataset, MixtureHooks, garbage_collected_once
from robo_loaders_plugin.mixtures.footprint import check_mixture_fits
from robo_loaders_plugin.mixtures.missing import ZEROS, device_of, filler, flag, missing_key, missing_lines
from robo_loaders_plugin.mixtures.padding import Padding, dim_mask, mask_key, pad_value, plan_padding
from robo_loaders_plugin.mixtures.spec import SIZE, MixtureError, MixtureSpec, parse_mixture
from robo_loaders_plugin.robomimic import compat
from robo_loaders_plugin.robomimic.joined import JoinedSamples
from robo_loaders_plugin.robomimic.sequence import window_settings
from robo_loaders_plugin.storage import cache

logger = get_logger(__name__)

WHERE = "train.data_mixture"
OBS_GROUPS = ("obs", "next_obs", "goal_obs")  # where robomimic's samples hold obs keys (renamed by a mixture)
# options that name one dataset's converted data: meaningless for a mixture of several
PER_DATASET_OPTIONS = {
    "shards": "each component is converted on first use into the cache directory",
    "source": "each component is converted on first use into the cache directory",
    "source_fps": "each component's rate is read from its env_args control_freq",
}


def mixture_spec(config) -> MixtureSpec | None:
    """The mixture ``train.data_mixture`` names, read and checked (no data read).

    Args:
        config: robomimic's config (one built without the plugin's config patch has no mixture).

    Returns:
        The :class:`~robo_loaders_plugin.mixtures.spec.MixtureSpec`, or ``None`` when the key is null.

    Raises:
        MixtureError: a bad mixture (one line naming the component), ``train.data`` is not its first component, or
            ``train.data_backend_kwargs`` names one dataset's data (``shards``, ``source``, ``source_fps``).
    """
    value = config.train.get("data_mixture")  # dict.get: configs built without the patch lack the key
    if value is None:
        return None
    spec = parse_mixture(value, "robomimic", WHERE)
    kwargs = config.train.get("data_backend_kwargs")
    for name, why in PER_DATASET_OPTIONS.items():
        if isinstance(kwargs, Mapping) and kwargs.get(name) is not None:
            raise MixtureError(
                f"train.data_backend_kwargs.{name} names one dataset's data, but {WHERE} has several; remove it ({why})"
            )
    data = config.train.data
    first = spec.components[0].source
    if not data or os.path.realpath(os.path.expanduser(data)) != os.path.realpath(first):
        raise MixtureError(
            f"{WHERE}: train.data ({data}) must be the mixture's first component ({first}): robomimic reads the env "
            "metadata and observation shapes from train.data; set train.data to it or list train.data first"
        )
    return spec


def applies(config, dataset_path) -> bool:
    """Whether a ``dataset_factory`` call builds the mixture: one is configured and the call is for ``train.data``.

    Args:
        config: robomimic's config.
        dataset_path: The call's ``dataset_path`` (``None``: ``train.data``).

    Returns:
        True when the mixture replaces the dataset.
    """
    if config.train.get("data_mixture") is None:
        return False
    if dataset_path is None:
        return True
    return os.path.realpath(os.path.expanduser(dataset_path)) == os.path.realpath(os.path.expanduser(config.train.data))


class RobomimicHooks(MixtureHooks):
    """robomimic's layout: obs keys nested under ``obs``/``next_obs``/``goal_obs`` (renamed there), numpy items."""

    def rename(self, batch_or_item, mapping, keep):
        """Rename obs keys inside the obs groups; every other key is robomimic's own and kept.

        Args:
            batch_or_item: A component's sample or batch.
            mapping: ``{component obs key: mixture obs key}``.
            keep: Unused (a component serves exactly the mixture's obs keys).

        Returns:
            The renamed sample or batch, keys in their order.
        """
        if not mapping:
            return batch_or_item
        out = dict(batch_or_item)
        for group in OBS_GROUPS:
            if isinstance(out.get(group), Mapping):
                out[group] = {mapping.get(k, k): v for k, v in out[group].items()}
        return out

    def pad(self, batch_or_item, sizes, rows):
        """Pad ``actions`` (and any padded ``train.dataset_keys`` key) and the padded low-dim observations under
        ``obs``/``next_obs``/``goal_obs``; each key's mask ``<key>_dim_mask`` at the top level of the sample, beside
        ``dataset_index``.

        Why at the top level: robomimic's algorithms read only ``obs``, ``next_obs``, ``goal_obs`` and ``actions``
        of a batch (``process_batch_for_training``), and slice every key under ``obs`` as a sequence, which a mask
        there would break; one mask per obs key serves ``obs`` and ``next_obs`` alike.

        Args:
            batch_or_item: A component's renamed sample or batch.
            sizes: ``{mixture key: (the component's size, the mixture's)}`` (obs keys and dataset keys).
            rows: A batch's rows, or ``None`` for a sample.

        Returns:
            The padded sample or batch.
        """
        out = dict(batch_or_item)
        masks = {}
        for key, (own, size) in sizes.items():
            if key in out and not isinstance(out[key], Mapping):
                out[key] = pad_value(out[key], own, size, key)
                masks[mask_key(key)] = dim_mask(out[key], own, size, rows)
                continue
            for group in OBS_GROUPS:
                if isinstance(out.get(group), Mapping) and key in out[group]:
                    out[group] = dict(out[group])
                    out[group][key] = pad_value(out[group][key], own, size, f"{group}/{key}")
                    masks.setdefault(mask_key(key), dim_mask(out[group][key], own, size, rows))
        out.update(masks)
        return out

    def template(self, item, camera):
        """What a sample of a component that has ``camera`` serves of it, per obs group.

        Args:
            item: A renamed sample.
            camera: The obs key.

        Returns:
            ``{(group, camera): value}``.
        """
        return {
            (g, camera): item[g][camera] for g in OBS_GROUPS if isinstance(item.get(g), Mapping) and camera in item[g]
        }

    def fill(self, batch_or_item, cameras, templates, rows):
        """Every camera of ``cameras`` last in each obs group (the component's own, or zeros shaped as
        ``templates``), and ``<camera>_is_missing`` at the top level, beside the masks and ``dataset_index``.

        Args:
            batch_or_item: A component's renamed, padded sample or batch.
            cameras: The obs keys served with ``"missing_cameras": "zeros"``.
            templates: ``{(group, camera): value}`` of what this component lacks.
            rows: A batch's rows, or ``None`` for a sample.

        Returns:
            The filled sample or batch.
        """
        out = dict(batch_or_item)
        device = device_of(out)  # the component's own: its fillers and flags beside its values (a GPU batch)
        for group in OBS_GROUPS:
            if isinstance(out.get(group), Mapping):
                values = dict(out[group])
                for camera in cameras:
                    value = values.pop(camera, None)
                    if value is None and (group, camera) in templates:
                        value = filler(templates[(group, camera)], rows, device)
                    if value is not None:
                        values[camera] = value
                out[group] = values
        for camera in cameras:
            out[missing_key(camera)] = flag((OBS_GROUPS[0], camera) in templates, rows, tensor=False, device=device)
        return out

    def dataset_index(self, components, batch):
        """An ``int64`` tensor for a batch (as robomimic's collate makes one), a numpy scalar for a sample.

        Args:
            components: The component of each item.
            batch: Whether a batch's value is wanted.

        Returns:
            The value.
        """
        values = np.asarray(components, dtype=np.int64)
        return torch.from_numpy(values) if batch else values[0]

    def before_workers(self, datasets) -> None:
        """robomimic's own ``SequenceDataset``s close their HDF5 file handles before worker processes start, as
        robomimic's dataset does at the end of its construction: each worker then opens the file itself instead of
        reading through a handle (and the HDF5 library's state) inherited from this process. The handle opens again
        when this process reads.

        Args:
            datasets: The components' datasets.
        """
        for dataset in datasets:
            close_file = getattr(dataset, "close_and_delete_hdf5_handle", None)
            if callable(close_file):
                close_file()

    def close_component(self, component_dataset):
        """A backend's dataset closed; robomimic's own ``SequenceDataset`` (``native``) its HDF5 file handle closed.

        Args:
            component_dataset: The component's dataset.
        """
        super().close_component(component_dataset)
        close_file = getattr(component_dataset, "close_and_delete_hdf5_handle", None)
        if callable(close_file):
            close_file()


class RobomimicMixture(MixtureDataset):
    """The mixture robomimic's ``train()`` sees: ``len()``, ``print()``, ``get_dataset_sampler()`` (none: the
    adapter's ``run_epoch`` serves the mixture's passes)."""

    setting = WHERE

    def join(self) -> bool:
        """Build the batches once over all components from now on (``robomimic.joined``) where they allow it; the
        nesting and key order are those of a batch built per component (one sample of the first component is read).

        Returns:
            Whether the batches are joined.
        """
        self.joined = None
        if not JoinedSamples.joinable(self):  # checked before a sample is read
            return False
        zero = np.zeros(1, np.int64)
        template = {k: v for k, v in self._per_component(zero, zero).items() if k != DATASET_INDEX}
        obs_keys = list(template["obs"]) if "obs" in template else []
        obs_keys = [k for k in obs_keys if k != "pad_mask"]
        self.joined = JoinedSamples(
            self.datasets, self.renames, obs_keys, self.padding, self.cameras, self.missing, template
        )
        return True

    def __repr__(self):
        """One line per component, the first :data:`~robo_loaders_plugin.core.units.NAMED_IN_A_LINE` of them and
        then how many more (robomimic's train script prints the dataset: 400 components were 400 lines)."""
        rows = [
            f"[{k}] {name}: {len(d)} samples, weight {'by size' if self.weights is None else f'{self.weights[k]:g}'}"
            for k, (name, d) in enumerate(zip(self.names, self.datasets, strict=True))
        ]
        if len(rows) > NAMED_IN_A_LINE:
            rows = rows[:NAMED_IN_A_LINE] + [f"... and {len(rows) - NAMED_IN_A_LINE} more components"]
        parts = "\n\t".join(rows)
        return f"RobomimicMixture (\n\t{parts}\n\tnum_sequences={len(self)}\n)"

    def get_obs_normalization_stats(self):
        """Refused: observation normalisation is not supported for mixtures.

        Raises:
            RuntimeError: always (``hdf5_normalize_obs`` is broken in robomimic 0.3.0; set it false).
        """
        raise RuntimeError(f"train.hdf5_normalize_obs is not supported with {WHERE} (it is broken in robomimic 0.3.0)")


def _fields(opts_load_next: bool) -> tuple[str, ...]:
    return ("obs", "next_obs") if opts_load_next else ("obs",)


def filter_settings(spec: MixtureSpec, filters: list[str | None], validating: bool) -> list[str]:
    """Where each component's filter key comes from, as a message names it: ``its filter_key``,
    ``train.hdf5_filter_key`` (the component gives none) or ``train.hdf5_validation_filter_key`` (every component's
    validation split).

    Args:
        spec: The mixture.
        filters: Each component's filter key for this split.
        validating: Whether this is the validation split.

    Returns:
        One setting per component.
    """
    if validating:
        return ["train.hdf5_validation_filter_key"] * len(filters)
    return ["its filter_key" if c.filter_key is not None else "train.hdf5_filter_key" for c in spec.components]


def component_key(rename: Mapping[str, str], key: str) -> str | None:
    """A component's own obs key served as the mixture's ``key``: the one its rename maps onto ``key``, else ``key``
    itself unless the component renames ``key`` away (then ``None``: it has no key for it).

    Why ``None`` and not ``key``: a component renaming its ``agentview_image`` to ``robot0_eye_in_hand_image`` in a
    mixture that also serves ``agentview_image`` was given its renamed-away camera for it, which its batches then
    lacked: joined, they served zeros without a flag.

    Args:
        rename: The component's ``{its key: mixture key}``.
        key: A mixture obs key.

    Returns:
        The component's key, or ``None``.
    """
    for src, dst in rename.items():
        if dst == key:
            return src
    return None if key in rename else key


def check_components(
    spec: MixtureSpec, config, obs_keys, filters: list[str | None], settings: list[str] | None = None
) -> tuple[list[float | None], Padding, list[list[str]]]:
    """Every component has the mixture's obs keys (after its renames) with component 0's shapes and dtypes, the
    same dataset keys, and its filter key; read from the files' metadata, before any data. Vectors (``actions``,
    low-dim observations: one dimension per step) of one dtype but different sizes are padded
    (``mixtures.padding``), as are those the mixture's ``pad`` names.

    Args:
        spec: The mixture.
        config: robomimic's config (``train.dataset_keys``, ``hdf5_load_next_obs``, ``goal_mode``).
        obs_keys: The mixture's obs keys.
        filters: Each component's filter key.
        settings: Where each filter key comes from (:func:`filter_settings`; ``None``: the training split's).

    Returns:
        Each component's recorded rate (``env_args`` ``control_freq``; ``None`` where it does not say), and the
        :class:`~robo_loaders_plugin.mixtures.padding.Padding` (keys: ``actions``, obs keys), and per component
        the cameras it lacks (``"missing_cameras": "zeros"``: served as zeros; component 0, ``train.data``, whose
        shapes robomimic reads, must have every camera).

    Raises:
        MixtureError: one line naming the component and what to do: an empty or unreadable file, a file with no
            demos, a filter key it lacks (naming the setting it came from and the keys it has) or that selects no
            demos, a missing key, a rename onto a key the component already has, a field robomimic would serve with
            another dtype than component 0's (dtypes as served: :func:`served_dtype`), or another shape unless both
            are vectors; a ``pad`` size smaller than a component's, or of a key that is not a vector.
    """
    from robo_loaders_plugin.robomimic.mixture_meta import component_files

    t = config.train
    groups = _fields(bool(t.hdf5_load_next_obs) or t.goal_mode == "last")
    settings = settings if settings is not None else filter_settings(spec, filters, validating=False)
    reference: dict[str, tuple] = {}
    rates = []
    vectors: list[dict[str, int]] = []
    missing: list[list[str]] = [[] for _ in spec.components]
    labels = [f"{WHERE}: component {k} ({comp.source})" for k, comp in enumerate(spec.components)]
    files = component_files(spec, labels, filters, settings, _cache_dir(config))
    for k, (comp, g) in enumerate(zip(spec.components, files, strict=True)):
        label = labels[k]
        own = g.obs_keys
        for src, dst in comp.rename.items():
            if src not in own:
                raise MixtureError(
                    f"{label}: rename names obs key {src!r}, which it does not have (it has {sorted(own)})"
                )
            if dst in own and dst not in comp.rename:
                raise MixtureError(
                    f"{label}: rename maps {src!r} onto {dst!r}, a key it already has; rename {dst!r} too, or "
                    "leave one of them out of the observation config"
                )
        fields = {}
        for mk in obs_keys:
            ck = component_key(comp.rename, mk)
            absent = ck is None or all(f"{gr}/{ck}" not in g.fields for gr in groups)
            # a camera (H, W, C) component 0 has, which this one lacks: zeros with "missing_cameras": "zeros"
            if k > 0 and absent and spec.missing_cameras == ZEROS and _is_camera(reference, groups, mk):
                missing[k].append(mk)
                continue
            if ck is None:
                raise MixtureError(
                    f"{label}: renames {mk!r} to {comp.rename[mk]!r}, and the mixture also serves {mk!r}, which "
                    f"this component then has no key for; rename another of its keys onto {mk!r}, or leave {mk!r} "
                    "out of the observation config"
                    + (' (or set "missing_cameras": "zeros")' if k > 0 and _is_camera(reference, groups, mk) else "")
                )
            for group in groups:
                name = f"{group}/{ck}"
                if name not in g.fields:
                    hint = f" (renamed from {ck!r})" if ck != mk else f"; add a rename {{'<its key>': {mk!r}}}"
                    if k > 0 and _is_camera(reference, groups, mk):  # the documented way, named (a reviewer's finding)
                        hint += ', or set "missing_cameras": "zeros" to serve zeros and a flag for it'
                    elif k == 0 and ck == mk and spec.missing_cameras == ZEROS and mk in _rgb_keys(config):
                        hint = (
                            '; with "missing_cameras": "zeros" the first component (train.data) must have every '
                            "camera (its shapes are the mixture's): list a component with every camera first, or "
                            "leave the key out of observation.modalities"
                        )
                    raise MixtureError(
                        f"{label}: has no {name} for the mixture's obs key {mk!r}{hint}; its obs keys: {sorted(own)}"
                    )
                shape, stored = g.fields[name]
                fields[f"{group}/{mk}"] = (shape, served_dtype(name, stored, t.hdf5_cache_mode))
        for key in t.dataset_keys:
            if key in g.fields:
                shape, stored = g.fields[key]
                fields[key] = (shape, served_dtype(key, stored, t.hdf5_cache_mode))
            else:
                fields[key] = ("missing",)
        vectors.append(_vectors(fields))
        if k == 0:
            reference = fields
        else:
            for name, got in fields.items():
                want = reference[name]
                if got != want and not _both_vectors(got, want):
                    first = f"component 0 ({spec.components[0].source})"
                    raise MixtureError(f"{label}: {_disagreement(name, got, want, first, t.hdf5_cache_mode)}")
        rates.append(g.rate)
    names = [f"component {k} ({c.source})" for k, c in enumerate(spec.components)]
    for line in missing_lines(names, missing):
        logger.info(line)
    return rates, plan_padding(WHERE, names, vectors, dict(spec.pad)), missing


def _rgb_keys(config) -> set[str]:
    """The obs keys the config serves as cameras (``observation.modalities.obs.rgb`` and ``goal.rgb``)."""
    modalities = config.observation.modalities
    return {k for part in ("obs", "goal") for k in (modalities[part].get("rgb") or ())}


def _is_camera(reference: Mapping, groups, key: str) -> bool:
    """Whether component 0 serves the mixture's obs ``key`` as a camera (frames of (H, W, C))."""
    field = reference.get(f"{groups[0]}/{key}")
    return field is not None and len(field[0]) == 3


def _cache_dir(config) -> str | None:
    """Where the mixture index is kept: ``train.data_backend_kwargs.cache_dir`` (``None``: the default cache root)."""
    kwargs = config.train.get("data_backend_kwargs")
    value = kwargs.get("cache_dir") if isinstance(kwargs, Mapping) else None
    return None if value is None else str(value)


def _both_vectors(got: tuple, want: tuple) -> bool:
    """Two fields that may be padded to one size: one dimension per step each, of one dtype."""
    return ("missing",) not in (got, want) and len(got[0]) == 1 and len(want[0]) == 1 and got[1] == want[1]


def _vectors(fields: dict[str, tuple]) -> dict[str, int]:
    """A component's vectors, ``{mixture key: size}``: ``train.dataset_keys`` keys and obs keys (named without their
    group: ``obs`` and ``next_obs`` have one size) of one dimension per step."""
    out = {}
    for name, desc in sorted(fields.items(), key=lambda item: "/" in item[0]):  # actions first, then obs keys
        if desc != ("missing",) and len(desc[0]) == 1:
            out[name.split("/", 1)[-1]] = int(desc[0][0])
    return out


CACHED_MODES = ("all", "low_dim")  # robomimic's hdf5_cache_mode values that load train.dataset_keys into memory


def served_dtype(key: str, stored: str, cache_mode: str | None) -> str:
    """The dtype robomimic 0.3.0's ``SequenceDataset`` serves a field in, from the dtype it is stored in.

    Why: under ``hdf5_cache_mode`` ``all`` or ``low_dim`` its ``load_dataset_in_memory`` reads every
    ``train.dataset_keys`` key with ``.astype('float32')`` (a float64 ``actions`` is served as float32, as a
    float32 one is); observations are served as stored under every mode, and dataset keys too without a cache mode.
    Components agree when robomimic serves them alike, not when their files do.

    Args:
        key: The field (``actions``, or ``obs/<key>``, ``next_obs/<key>``: observations have a ``/``).
        stored: Its dtype in the file.
        cache_mode: ``train.hdf5_cache_mode``.

    Returns:
        The served dtype's name.
    """
    return "float32" if "/" not in key and cache_mode in CACHED_MODES else stored


def _disagreement(name: str, got: tuple, want: tuple, first: str, cache_mode: str | None) -> str:
    """What is wrong with a field a component serves unlike the first component, and what to do, by kind of field.

    Two vectors of different sizes are padded to one (``plan_padding``): where they also differ in dtype, the dtype
    is what is wrong, and the message says so (it blamed the size, telling the user to drop ``actions``)."""
    vectors = ("missing",) not in (got, want) and len(got[0]) == 1 and len(want[0]) == 1
    shapes_differ = got[0] != want[0] and not vectors
    if "/" in name:  # an observation: served as stored under every cache mode
        why = "shapes" if shapes_differ else "dtypes (robomimic serves observations as stored)"
        return (
            f"{name} is {_shape(got)} but {_shape(want)} in {first}; the components would serve different {why}: "
            "rename another key of the same shape and dtype onto it, or leave the key out of the observation config"
        )
    if ("missing",) in (got, want):
        instead = "zeros of shape (1,) in its place" if cache_mode in CACHED_MODES else "nothing: it fails to read it"
        where = f"it has no {name}, which {first} has ({_shape(want)})" if got == ("missing",) else (
            f"{name} is {_shape(got)} but {first} has none"
        )  # fmt: skip
        return (
            f"{where} (train.dataset_keys), and robomimic serves a file without it {instead}; remove {name!r} from "
            "train.dataset_keys or the component from the mixture"
        )
    if shapes_differ:
        return (
            f"{name} (train.dataset_keys) is {_shape(got)} but {_shape(want)} in {first}; components must serve it "
            f"with one shape (for actions: the same action space): mix files that agree, or remove {name!r} from "
            "train.dataset_keys"
        )
    mode = "null" if cache_mode is None else repr(cache_mode)
    return (
        f"{name} (train.dataset_keys) is {_shape(got)} but {_shape(want)} in {first}; with train.hdf5_cache_mode "
        f"{mode} robomimic serves it as stored, so the components would serve different dtypes: set "
        "train.hdf5_cache_mode to 'low_dim' or 'all' (robomimic then casts it to float32 in every component) or "
        f"store it as {want[1]} in this file"
    )


def _shape(desc: tuple) -> str:
    return "missing" if desc == ("missing",) else f"{desc[0]} {desc[1]}"


def padded_shape_meta(config, shape_meta: dict) -> dict:
    """robomimic's ``shape_meta`` of ``train.data`` with the mixture's padded sizes: ``ac_dim`` and the padded
    low-dim observations' shapes, so that the models ``train()`` builds take what the mixture serves.

    Args:
        config: robomimic's config (``train.data_mixture`` set, ``train.data`` its first component).
        shape_meta: ``get_shape_metadata_from_dataset``'s result for ``train.data``.

    Returns:
        A copy with the padded sizes (the same values without padding).

    Raises:
        MixtureError: the mixture is refused (the checks of :func:`check_components`), before any data is read.
    """
    spec = mixture_spec(config)
    assert spec is not None
    t = config.train
    filters = [c.filter_key or t.hdf5_filter_key for c in spec.components]
    _, padding, _ = check_components(spec, config, list(shape_meta["all_obs_keys"]), filters)
    _check_rollouts(config, shape_meta, padding.sizes)
    out = dict(shape_meta)
    out["all_shapes"] = type(shape_meta["all_shapes"])(shape_meta["all_shapes"])
    for key, size in padding.sizes.items():
        if key == "actions":
            out["ac_dim"] = int(size)
        elif key in out["all_shapes"]:
            out["all_shapes"][key] = [int(size)]
    if padding:
        sizes = ", ".join(f"{k} {s}" for k, s in padding.sizes.items())
        logger.info(f"{WHERE}: robomimic builds its models for the mixture's padded shapes ({sizes})")
    return out


def _check_rollouts(config, shape_meta: Mapping, sizes: Mapping[str, int]) -> None:
    """Refuse rollouts where the models are built for padded shapes ``train.data``'s environment does not have.

    Why: robomimic's script runs rollouts (``experiment.rollout.enabled``, every ``rollout.rate`` epochs) in the
    environment of ``train.data``, which gives that robot's own observations and takes its own actions; a model built
    for wider ones fails at its first rollout (``input.size(-1) must be equal to input_size``), after the first
    ``rollout.rate`` epochs of training (a reviewer's reproduction). Refused before any data is read instead.
    Where ``train.data`` holds the widest sizes, padding leaves its shapes as they are and rollouts run.
    """
    experiment = config.get("experiment") if hasattr(config, "get") else None
    rollout = experiment.get("rollout") if experiment is not None else None
    if rollout is None or not rollout.get("enabled"):
        return
    own = {"actions": shape_meta.get("ac_dim")}
    own.update({k: list(v)[-1] for k, v in shape_meta["all_shapes"].items() if len(v) == 1})
    wider = [f"{k} {own[k]} -> {size}" for k, size in sizes.items() if k in own and own[k] != size]
    if wider:
        raise MixtureError(
            f"{WHERE}: experiment.rollout.enabled runs the policy in train.data's environment, which serves and "
            f"takes its own sizes, but the models are built for the mixture's padded ones ({', '.join(wider)}): set "
            "experiment.rollout.enabled to false, or make train.data (the first component) a file of the widest sizes"
        )


def _rate_choices(spec: MixtureSpec, choice: BackendChoice, config, rates) -> list[BackendChoice]:
    """One backend choice per component: the same one, or (rates converted) the choice with ``target_fps`` and the
    component's own rate as ``source_fps``."""
    kwargs = dict(config.train.get("data_backend_kwargs") or {})
    option_target = kwargs.get("target_fps")
    target = spec.target_fps if spec.target_fps is not None else option_target
    if spec.target_fps is not None and option_target is not None and float(option_target) != spec.target_fps:
        raise MixtureError(
            f"{WHERE}: target_fps {spec.target_fps:g} differs from train.data_backend_kwargs.target_fps "
            f"{float(option_target):g}; give it once"
        )
    if target is None:
        known = [(k, r) for k, r in enumerate(rates) if r is not None]
        for k, r in known[1:]:
            if not math.isclose(r, known[0][1]):
                k0, r0 = known[0]
                raise MixtureError(
                    f"{WHERE}: component {k} ({spec.components[k].source}) was recorded at {r:g} Hz but component "
                    f"{k0} at {r0:g} Hz; set target_fps in the mixture (converted by backend "
                    f"{', '.join(repr(n) for n in rate_converting_backends('robomimic'))})"
                )
        if known:
            _warn_unknown_rates(spec, rates, known[0])
        return [choice] * len(rates)
    converting = rate_converting_backends("robomimic")
    if choice.name not in converting:
        raise MixtureError(
            f"{WHERE}: target_fps needs a backend that converts rates ({', '.join(converting)}); "
            f"train.data_backend is {choice.name!r}: set train.data_backend to one of them or remove target_fps"
        )
    out = []
    for k, rate in enumerate(rates):
        if rate is None:
            raise MixtureError(
                f"{WHERE}: component {k} ({spec.components[k].source}) does not say the rate it was recorded at "
                "(no control_freq above 0 in its env_args), so it cannot be converted to target_fps; add "
                "control_freq to its data.attrs['env_args'] env_kwargs"
            )
        out.append(
            choose_backend(
                "robomimic",
                choice.name,
                {**kwargs, "target_fps": float(target), "source_fps": rate},
                name_where="train.data_backend",
                options_where="train.data_backend_kwargs",
            )
        )
    return out


def _warn_unknown_rates(spec: MixtureSpec, rates, known: tuple[int, float]) -> None:
    """A warning (once) per component that does not say its rate, beside one that does.

    Why a warning and not a refusal: each component is served exactly as its own SequenceDataset (robomimic trains
    on such a file without asking its rate, and real-robot files often lack robosuite's ``control_freq``); what
    cannot be checked is only whether its steps are as far apart in time as the others', which the user knows.
    """
    k0, r0 = known
    for k, rate in enumerate(rates):
        if rate is None:
            warn_once(
                logger,
                f"warning: {WHERE}: component {k} ({spec.components[k].source}) does not say the rate it was "
                f"recorded at (no control_freq above 0 in its env_args) but component {k0} "
                f"({spec.components[k0].source}) was recorded at {r0:g} Hz; both are served at their own rate, so if "
                f"component {k} was recorded at another rate its windows span another time: add control_freq to its "
                "data.attrs['env_args'] env_kwargs (different rates are then refused, or converted with target_fps)",
            )


def _bounded(choice: BackendChoice) -> BackendChoice:
    """The component's choice with its episode buffer at the default bound (``mixtures.footprint.bounded_buffer``)."""
    from robo_loaders_plugin.mixtures.footprint import bounded_buffer

    return bounded_buffer(
        choice,
        lambda given: choose_backend(
            "robomimic",
            choice.name,
            given,
            name_where="train.data_backend",
            options_where="train.data_backend_kwargs",
        ),
    )


@garbage_collected_once()
def build_mixture(config, obs_keys, choice: BackendChoice, filter_by_attribute=None, rank=None, world_size=None):
    """The mixture's dataset for robomimic's ``dataset_factory`` call on ``train.data``.

    The training split (``filter_by_attribute`` = ``train.hdf5_filter_key``) uses each component's ``filter_key``
    (default: robomimic's own) and the mixture's weights; the validation split (``train.hdf5_validation_filter_key``
    with ``experiment.validate``) uses that key in every component, weighted by size (each validation window once
    per pass, as robomimic's own validation).

    Args:
        config: robomimic's config.
        obs_keys: The mixture's obs keys (robomimic's observation config).
        choice: The backend choice every component is built with.
        filter_by_attribute: robomimic's filter key for this split.
        rank: See ``integration.dataset_factory``.
        world_size: See ``integration.dataset_factory``.

    Returns:
        A :class:`RobomimicMixture`, recorded as a ``batch`` dataset for the adapter's ``run_epoch``.

    Raises:
        MixtureError: a bad mixture, components whose keys, shapes, dtypes or rates disagree, or options that
            cannot apply to a mixture; before any data is read.
        ResourceRefused: the components do not fit the machine together (``mixtures.footprint``), before any is
            built.
        RoboLoadersError: what a single dataset's build raises.
    """
    spec = mixture_spec(config)
    assert spec is not None  # applies() said there is one
    alone = (rank, world_size) == (0, 1)  # given so explicitly: a dataset for this process alone
    rank, world_size = resolve_ranks(rank, world_size, "robomimic dataset_factory: ")
    compat.check_version()
    choice.check_device()
    t = config.train
    if t.hdf5_normalize_obs:  # robomimic's train() would ask the mixture for its statistics after the build
        raise MixtureError(
            f"{WHERE} with train.hdf5_normalize_obs=true is not supported (robomimic 0.3.0's observation "
            "normalisation is broken); set train.hdf5_normalize_obs=false"
        )
    validating = bool(config.experiment.validate) and filter_by_attribute is not None
    validating = validating and filter_by_attribute == t.hdf5_validation_filter_key != t.hdf5_filter_key
    filters = [filter_by_attribute if validating else (c.filter_key or filter_by_attribute) for c in spec.components]
    if config.experiment.validate and t.hdf5_validation_filter_key is not None and not validating:
        from robo_loaders_plugin.robomimic.mixture_meta import check_disjoint_splits

        check_disjoint_splits(
            spec,
            [f"{WHERE}: component {k} ({c.source})" for k, c in enumerate(spec.components)],
            filters,
            filter_settings(spec, filters, validating=False),
            t.hdf5_validation_filter_key,
            _cache_dir(config),
        )
    rates, padding, missing = check_components(
        spec, config, list(obs_keys), filters, filter_settings(spec, filters, validating)
    )
    choices = [_bounded(c) for c in _rate_choices(spec, choice, config, rates)]
    comp_keys = []
    for comp in spec.components:
        for src, dst in comp.rename.items():  # robomimic's own loader asks the obs key's modality
            compat.register_obs_key_like(src, dst)
        lacking = missing[len(comp_keys)]
        comp_keys.append([component_key(comp.rename, key) for key in obs_keys if key not in lacking])
    datasets = []
    with cache.placements_planned_once():  # each component's store looked for once, for its plan and its build
        check_mixture_fits(
            WHERE,
            [os.path.basename(c.source) for c in spec.components],
            lambda k, committed: choices[k].plan(
                config, comp_keys[k], filter_by_attribute=filters[k], dataset_path=spec.components[k].source,
                committed=committed,
            ),
            backend=choice.name,
            option_prefix="train.data_backend_kwargs",
        )  # fmt: skip
        with ComponentLines(len(spec.components), choice.name, logger, WHERE) as lines:
            for k, comp in enumerate(spec.components):
                dataset = choices[k].build(
                    config, comp_keys[k], filter_by_attribute=filters[k], dataset_path=comp.source
                )
                base = os.path.basename(comp.source)
                line = f"robomimic data mixture component {k} ({base}, {filters[k] or 'all demos'}): "
                lines.built(f"component {k} ({base})", dataset, line + iteration.summary_of(dataset))
                datasets.append(dataset)
    weights = None if (validating or spec.weights == SIZE) else spec.weight_vector()
    names = [os.path.basename(c.source) for c in spec.components]
    how = "by size" if weights is None else some_of(f"{w:g}" for w in weights)
    summary = f"mixture of {len(datasets)} ({some_of(names)}; weights {how}), {sum(map(len, datasets))} samples"
    mix = RobomimicMixture(
        datasets,
        names,
        [c.rename for c in spec.components],
        None,
        RobomimicHooks(),
        weights,
        int(t.seed),
        iteration.Serving(summary),
        padding=padding,
        cameras=[key for key in obs_keys if any(key in lacking for lacking in missing)],
        missing=missing,
    )
    mix.join()

    def setup():  # what every rank must share
        return {
            "train.seed": int(t.seed),
            "backend": choice.name,
            "train.data_backend_kwargs": choice.options.shared(),
            WHERE: repr(spec),
            "samples": len(mix),
            "sources (file sizes)": [source_identity(c.source) for c in spec.components],
            "filter keys": filters,
            "windows (train.*, obs keys)": window_settings(config, list(obs_keys)),
        }

    shared = setup() if world_size > 1 else None
    check_ranks_agree(shared or setup, f"robomimic data backend {choice.name}", (rank, world_size), alone)
    iteration.record_built(mix, choice, rank, world_size, int(t.seed), shared, served_as=BATCH)
    split = filter_by_attribute or "all demos"
    logger.info(f"robomimic data backend: {choice.name} [{split}] {summary}")
    return mix
