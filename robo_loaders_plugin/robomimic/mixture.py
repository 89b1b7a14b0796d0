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
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.ranks import check_ranks_agree, resolve_ranks, source_identity
from robo_loaders_plugin.core.registry import choose_backend, rate_converting_backends
from robo_loaders_plugin.core.spec import BATCH, BackendChoice
from robo_loaders_plugin.mixtures.dataset import MixtureDataset, MixtureHooks
from robo_loaders_plugin.mixtures.footprint import check_mixture_fits
from robo_loaders_plugin.mixtures.spec import SIZE, MixtureError, MixtureSpec, parse_mixture
from robo_loaders_plugin.robomimic import compat

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


class RobomimicMixture(MixtureDataset):
    """The mixture robomimic's ``train()`` sees: ``len()``, ``print()``, ``get_dataset_sampler()`` (none: the
    adapter's ``run_epoch`` serves the mixture's passes)."""

    def __repr__(self):
        parts = "\n\t".join(
            f"[{k}] {name}: {len(d)} samples, weight {'by size' if self.weights is None else f'{self.weights[k]:g}'}"
            for k, (name, d) in enumerate(zip(self.names, self.datasets, strict=True))
        )
        return f"RobomimicMixture (\n\t{parts}\n\tnum_sequences={len(self)}\n)"

    def get_obs_normalization_stats(self):
        """Refused: observation normalisation is not supported for mixtures.

        Raises:
            RuntimeError: always (``hdf5_normalize_obs`` is broken in robomimic 0.3.0; set it false).
        """
        raise RuntimeError(f"train.hdf5_normalize_obs is not supported with {WHERE} (it is broken in robomimic 0.3.0)")


def _fields(opts_load_next: bool) -> tuple[str, ...]:
    return ("obs", "next_obs") if opts_load_next else ("obs",)


def check_components(spec: MixtureSpec, config, obs_keys, filters: list[str | None]) -> list[float | None]:
    """Every component has the mixture's obs keys (after its renames) with component 0's shapes and dtypes, the
    same dataset keys, and its filter key; read from the files' metadata, before any data.

    Args:
        spec: The mixture.
        config: robomimic's config (``train.dataset_keys``, ``hdf5_load_next_obs``, ``goal_mode``).
        obs_keys: The mixture's obs keys.
        filters: Each component's filter key.

    Returns:
        Each component's recorded rate (``env_args`` ``control_freq``; ``None`` where it does not say).

    Raises:
        MixtureError: one line naming the component and key: a missing key, a rename onto a key the component
            already has, a shape or dtype unlike component 0's.
        SourceError: a file that is not a robomimic file, or a filter key it lacks.
    """
    from robo_loaders_plugin.robomimic.sequence import recorded_fps
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5

    t = config.train
    groups = _fields(bool(t.hdf5_load_next_obs) or t.goal_mode == "last")
    reference: dict[str, tuple] = {}
    rates = []
    for k, comp in enumerate(spec.components):
        label = f"{WHERE}: component {k} ({comp.source})"
        source = RobomimicHdf5(comp.source, check=False)
        with source.open() as f:
            demos = source.demos(f, filters[k])
            if not demos:
                raise MixtureError(f"{label}: filter key {filters[k]!r} selects no demos; choose another filter_key")
            g = f["data"][demos[0]]
            own = set(g["obs"].keys()) if "obs" in g else set()
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
            inverse = {dst: src for src, dst in comp.rename.items()}
            fields = {}
            for mk in obs_keys:
                ck = inverse.get(mk, mk)
                for group in groups:
                    name = f"{group}/{ck}"
                    if name not in g:
                        hint = f" (renamed from {ck!r})" if ck != mk else f"; add a rename {{'<its key>': {mk!r}}}"
                        raise MixtureError(
                            f"{label}: has no {name} for the mixture's obs key {mk!r}{hint}; "
                            f"its obs keys: {sorted(own)}"
                        )
                    fields[f"{group}/{mk}"] = (tuple(g[name].shape[1:]), str(g[name].dtype))
            for key in t.dataset_keys:
                if key in g:
                    fields[key] = (tuple(g[key].shape[1:]), str(g[key].dtype))
                else:
                    fields[key] = ("missing",)
            if k == 0:
                reference = fields
            else:
                for name, got in fields.items():
                    want = reference[name]
                    if got != want:
                        raise MixtureError(
                            f"{label}: {name} is {_shape(got)} but {_shape(want)} in component 0 "
                            f"({spec.components[0].source}); components must agree on shapes and dtypes (rename "
                            "another key of the same shape onto it, or leave the key out of the observation config)"
                        )
            rates.append(recorded_fps(source, f))
    return rates


def _shape(desc: tuple) -> str:
    return "missing" if desc == ("missing",) else f"{desc[0]} {desc[1]}"


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
                "(no control_freq in its env_args), so it cannot be converted to target_fps; add control_freq to "
                "its data.attrs['env_args'] env_kwargs"
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
    rank, world_size = resolve_ranks(rank, world_size, "robomimic dataset_factory: ")
    compat.check_version()
    choice.check_device()
    t = config.train
    validating = bool(config.experiment.validate) and filter_by_attribute is not None
    validating = validating and filter_by_attribute == t.hdf5_validation_filter_key != t.hdf5_filter_key
    filters = [filter_by_attribute if validating else (c.filter_key or filter_by_attribute) for c in spec.components]
    rates = check_components(spec, config, list(obs_keys), filters)
    choices = [_bounded(c) for c in _rate_choices(spec, choice, config, rates)]
    comp_keys = []
    for comp in spec.components:
        inverse = {dst: src for src, dst in comp.rename.items()}
        for src, dst in comp.rename.items():  # robomimic's own loader asks the obs key's modality
            compat.register_obs_key_like(src, dst)
        comp_keys.append([inverse.get(key, key) for key in obs_keys])
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
    datasets = []
    for k, comp in enumerate(spec.components):
        dataset = choices[k].build(config, comp_keys[k], filter_by_attribute=filters[k], dataset_path=comp.source)
        logger.info(
            f"robomimic data mixture component {k} ({os.path.basename(comp.source)}, {filters[k] or 'all demos'}): "
            f"{iteration.summary_of(dataset)}"
        )
        datasets.append(dataset)
    weights = None if (validating or spec.weights == SIZE) else spec.weight_vector()
    names = [os.path.basename(c.source) for c in spec.components]
    how = "by size" if weights is None else ", ".join(f"{w:g}" for w in weights)
    summary = f"mixture of {len(datasets)} ({', '.join(names)}; weights {how}), {sum(map(len, datasets))} samples"
    mix = RobomimicMixture(
        datasets,
        names,
        [c.rename for c in spec.components],
        None,
        RobomimicHooks(),
        weights,
        int(t.seed),
        iteration.Serving(summary),
    )

    def setup():  # what every rank must share
        return {
            "train.seed": int(t.seed),
            "backend": choice.name,
            "train.data_backend_kwargs": choice.options.shared(),
            WHERE: repr(spec),
            "samples": len(mix),
            "sources (file sizes)": [source_identity(c.source) for c in spec.components],
        }

    shared = setup() if world_size > 1 else None
    check_ranks_agree(shared or setup, f"robomimic data backend {choice.name}", (rank, world_size))
    iteration.record_built(mix, choice, rank, world_size, int(t.seed), shared, served_as=BATCH)
    split = filter_by_attribute or "all demos"
    logger.info(f"robomimic data backend: {choice.name} [{split}] {summary}")
    return mix
