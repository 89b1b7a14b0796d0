"""What ``train.data_mixture``'s checks read of each component's HDF5 file, read once per (file, filter key) and kept
in the mixture index (``mixtures.index``), so a later start opens no component's file for them.

Why: the checks (``mixture.check_components``, run for robomimic's shape read, the training split and the validation
split) opened every component's file at every start: ~7 ms each at load 3 (``benchmarks/mixture_index.py``), so a
mixture of hundreds of files paid seconds before any dataset was built, on every run. A component's record holds
exactly what the checks read: the demos under the filter key (the first is the one its shapes are read from; all of
them for the check that the training and validation splits share none), its obs keys,
the shape and stored dtype of every dataset of that demo (the served dtype depends on ``train.hdf5_cache_mode`` and
is derived at check time), and the rate its ``env_args`` say. A file whose stat changed (edited in place, truncated,
replaced, renamed onto the path) is read again alone (``ComponentIndex(by_content=False)``); a file that cannot be
read, or whose filter key does not hold, is refused naming the component each start (nothing is kept for it).
"""

from __future__ import annotations

import json
import os

from robo_loaders_plugin.mixtures.spec import MixtureError, MixtureSpec

INDEX_KIND = "robomimic-meta-3"  # the mixture index's records of robomimic files (mixtures.index)
CACHE_DIR_OPTION = "train.data_backend_kwargs.cache_dir"  # where the index is kept, as the user sets it


class ComponentFile:
    """A component's record as the checks read it.

    Attributes:
        obs_keys: The keys under the first demo's ``obs`` group.
        fields: ``{name: (shape per step, stored dtype)}`` of every dataset under the first demo (``actions``,
            ``obs/<key>``, ``next_obs/<key>``, ...).
        rate: The rate its ``env_args`` say (``control_freq``), or ``None``.
        demos: Its demos under the filter key, in robomimic's order.
    """

    def __init__(self, record: dict):
        self.demos = list(record["demos"])
        self.obs_keys = set(record["obs_keys"])
        self.fields = {name: (tuple(shape), str(dtype)) for name, (shape, dtype) in record["fields"].items()}
        self.rate = None if record["rate"] is None else float(record["rate"])


def read_record(label: str, path: str, filter_key: str | None, setting: str) -> dict:
    """A component's record, read from its file (:class:`ComponentFile` gives it back), as JSON; its fields
    describe the first of ``demos`` (robomimic's order under the filter key).

    Args:
        label: Names the component in messages (``train.data_mixture: component <k> (<path>)``).
        path: Its HDF5 file.
        filter_key: Its filter key for this split (``None``: every demo).
        setting: Where the filter key comes from (``mixture.filter_settings``).

    Returns:
        The record.

    Raises:
        MixtureError: an empty or unreadable file, one without demos, a filter key it lacks or that selects none.
    """
    from robo_loaders_plugin.robomimic.sequence import recorded_fps
    from robo_loaders_plugin.sources.robomimic_hdf5 import datasets

    source = _open_component(label, path)
    with source.open() as f:
        demos = _component_demos(label, source, f, filter_key, setting)
        g = f["data"][demos[0]]
        return {
            "demos": demos,
            "obs_keys": sorted(g["obs"].keys()) if "obs" in g else [],
            # in this machine's byte order, as every loader serves them: a big-endian file beside a little-endian one
            # was refused as serving another dtype (a reviewer's reproduction)
            "fields": {
                name: [[int(n) for n in d.shape[1:]], str(d.dtype.newbyteorder("="))] for name, d in datasets(g)
            },
            "rate": recorded_fps(source, f),
        }


def component_files(
    spec: MixtureSpec,
    labels: list[str],
    filters: list[str | None],
    settings: list[str],
    cache_dir: str | None = None,
) -> list[ComponentFile]:
    """Every component's :class:`ComponentFile`, from the mixture index where its file is unchanged since it was
    read with this filter key, else read (in parallel) and kept.

    Args:
        spec: The mixture.
        labels: Each component's label for messages.
        filters: Each component's filter key for this split.
        settings: Where each filter key comes from.
        cache_dir: The cache root the index is kept in (``train.data_backend_kwargs.cache_dir``; ``None``: the
            default root).

    Returns:
        One per component, in order.

    Raises:
        MixtureError: as :func:`read_record`, for the first component (in order) that fails.
    """
    from robo_loaders_plugin.mixtures.index import ComponentIndex

    sources = [c.source for c in spec.components]
    index = ComponentIndex(
        INDEX_KIND,
        (),
        lambda k: read_record(labels[k], sources[k], filters[k], settings[k]),
        cache_dir,
        CACHE_DIR_OPTION,
        by_content=False,
        parse=ComponentFile,
    )
    return index.records(sources, [json.dumps(key) for key in filters])


def _open_component(label: str, path: str):
    """The component's file, opened for its metadata; an empty or unreadable file refused naming the component
    (``open_hdf5``'s own line names the file only, and says to check ``train.data``)."""
    from robo_loaders_plugin.core.errors import SourceError
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5

    try:
        empty = os.path.getsize(path) == 0
    except OSError:
        raise MixtureError(f"{label}: the file no longer exists; fix the path or remove the component") from None
    if empty:
        raise MixtureError(
            f"{label}: the file is empty (0 bytes), not an HDF5 file; copy or regenerate it, or remove the component"
        )
    try:
        return RobomimicHdf5(path, check=False)
    except SourceError as exc:
        why = exc.__cause__ or exc
        raise MixtureError(
            f"{label}: cannot be opened as HDF5 ({why}): it is truncated, corrupt or not an HDF5 file; copy or "
            "regenerate it, or remove the component"
        ) from None


def check_disjoint_splits(
    spec: MixtureSpec,
    labels: list[str],
    train_keys: list,
    train_settings: list[str],
    valid_key: str,
    cache_dir: str | None = None,
) -> None:
    """Refuse a component whose training demos are among its validation demos, as robomimic's ``train()`` refuses
    them for ``train.data`` alone: a component's ``filter_key`` was never compared with
    ``train.hdf5_validation_filter_key``, so a model was validated on demos it trained on, with nothing said (a
    reviewer's reproduction). Both splits' demos come from the mixture index (:func:`component_files`), which the
    checks of each split read anyway: no component's file is opened again for it.

    Args:
        spec: The mixture.
        labels: Each component's label (the mixture's key, its index and file), for the messages.
        train_keys: Each component's training filter key (its ``filter_key``, else ``train.hdf5_filter_key``;
            ``None``: every demo).
        train_settings: Where each training filter key comes from (``mixture.filter_settings``).
        valid_key: ``train.hdf5_validation_filter_key``.
        cache_dir: The cache root the index is kept in (``None``: the default root).

    Raises:
        MixtureError: a component's two splits share demos, naming both keys and a few of the demos; or as
            :func:`read_record`.
    """
    n = len(spec.components)
    train = component_files(spec, labels, train_keys, train_settings, cache_dir)
    valid = component_files(spec, labels, [valid_key] * n, ["train.hdf5_validation_filter_key"] * n, cache_dir)
    for label, train_key, t, v in zip(labels, train_keys, train, valid, strict=True):
        held_out = set(v.demos)
        shared = [d for d in t.demos if d in held_out]
        if shared:
            what = f"filter_key {train_key!r}" if train_key is not None else "every demo (no filter key)"
            raise MixtureError(
                f"{label}: its training demos ({what}) overlap its validation demos "
                f"(train.hdf5_validation_filter_key {valid_key!r}): {len(shared)} shared, e.g. {shared[:3]}; give the "
                "component a filter_key whose demos are not in the validation one"
            )


def _component_demos(label: str, source, f, filter_key: str | None, setting: str) -> list[str]:
    """The component's demos for this split, in robomimic's order; a file without demos, or a filter key it lacks
    or that selects none, refused naming the component and the setting the key came from."""
    import h5py

    from robo_loaders_plugin.core.errors import SourceError

    if not isinstance(f.get("data"), h5py.Group):
        raise MixtureError(
            f"{label}: the file has no 'data' group, so it is not a robomimic dataset; give a robomimic HDF5 file or "
            "remove the component"
        )
    if len(f["data"]) == 0:
        raise MixtureError(
            f"{label}: the file has 0 demos (data/ holds no demo_<i> group), so it has nothing to serve; give a file "
            "with demos or remove the component"
        )
    if filter_key is not None:
        from robo_loaders_plugin.sources.robomimic_hdf5 import mask_keys

        masks = mask_keys(f)  # masks in a group too (splits/train), as robomimic reads them
        if filter_key not in masks:
            has = f"it has {', '.join(map(repr, masks))}" if masks else "it has no mask/ filter keys"
            raise MixtureError(
                f"{label}: {setting} {filter_key!r} is not in the file's mask/ ({has}); {_filter_advice(setting)}"
            )
    try:
        demos = source.demos(f, filter_key)
    except SourceError as exc:
        raise MixtureError(f"{label}: {exc}") from None
    if not demos:
        raise MixtureError(
            f"{label}: {setting} {filter_key!r} selects no demos (mask/{filter_key} is empty); "
            f"{_filter_advice(setting)}"
        )
    return demos


def _filter_advice(setting: str) -> str:
    """What to do about a filter key a component lacks, by the setting it came from."""
    if setting == "its filter_key":
        return "set the component's filter_key to a mask/ key it has"
    if setting == "train.hdf5_filter_key":
        return (
            "give this component a filter_key it has (components without one use train.hdf5_filter_key), or add "
            "the mask to its file (robomimic's scripts/split_train_val.py)"
        )
    return (
        "every component's validation split uses it: add the mask to this file (robomimic's "
        "scripts/split_train_val.py) or set experiment.validate to false"
    )
