"""A resumed ``lerobot-train`` run (``--resume=true``) continues on the data its checkpoint trained on: the same
mixture, or the same one dataset, checked before any data is read.

Why: lerobot-train positions its sampler at the checkpoint's step (``training_state/training_step.json``) whatever
it is given to train on, so a resumed run given another ``--dataset.mixture`` continued the old run's step on other
data (the mixture's batch after the checkpoint's), neither the saved run nor a fresh start, without a word; so did a
run trained on one dataset resumed on a mixture, or the reverse. What a checkpoint trained on is recorded beside its
step, in the same checkpoint: ``pretrained_model/train_config.json``, which lerobot-train writes at every checkpoint
(``save_checkpoint``) and reads back through ``--config_path``; its ``dataset`` holds the mixture resolved (inline
JSON with absolute roots, ``mixture_flag.canonical_json``, saved so since mixtures exist) or the one dataset's
``repo_id``/``root``. The run's dataset flags override that file, so they are compared with it.
"""

from __future__ import annotations

import json
import os

from robo_loaders_plugin.core.spec import DEFAULT_BACKEND
from robo_loaders_plugin.core.units import some_of
from robo_loaders_plugin.lerobot.flags import MIXTURE_FLAG

MAX_LISTED = 4  # differences named in the refusal; the rest are counted
DATASET_FLAGS = "--dataset.mixture, --dataset.repo_id, --dataset.root or --dataset.episodes"
COMPONENT_STATS_FILE = "component_stats.json"  # in a checkpoint's pretrained_model/ (lerobot.mixture writes it)
DRAWN = "in the order drawn"


def saved_dataset(checkpoint_path) -> dict | None:
    """The ``dataset`` section of a checkpoint's ``pretrained_model/train_config.json``.

    Args:
        checkpoint_path: The checkpoint's directory (lerobot-train's ``cfg.checkpoint_path``).

    Returns:
        The section as saved (``mixture`` absent in a run saved without the plugin), or ``None`` when the checkpoint
        has no readable ``train_config.json`` (nothing to compare with).
    """
    from lerobot.configs.train import TRAIN_CONFIG_NAME
    from lerobot.utils.constants import PRETRAINED_MODEL_DIR

    path = os.path.join(str(checkpoint_path), PRETRAINED_MODEL_DIR, TRAIN_CONFIG_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            dataset = json.load(f).get("dataset")
    except (OSError, ValueError, AttributeError):
        return None
    return dataset if isinstance(dataset, dict) else None


def _component(entry: dict) -> dict:
    """A component's fields that decide what it serves, in one form (roots absolute, weights floats)."""
    root = entry.get("root")
    if isinstance(root, str) and "://" not in root:
        root = os.path.normpath(os.path.abspath(os.path.expanduser(root)))
    weight, episodes = entry.get("weight"), entry.get("episodes")
    return {
        "repo_id": entry.get("repo_id"),
        "root": root,
        "weight": None if weight is None else float(weight),
        "episodes": None if episodes is None else [int(e) for e in episodes],
        "rename": dict(entry.get("rename") or {}),
        "drop": list(entry.get("drop") or []),
    }


def served_mixture(mixture, backend: str | None, backend_kwargs) -> dict | None:
    """What decides the data a mixture serves, in a form two runs' can be compared in.

    Args:
        mixture: ``dataset.mixture`` as saved (canonical inline JSON) or as the run holds it; ``None`` or blank:
            no mixture.
        backend: ``dataset.backend`` (a ``target_fps`` in ``backend_kwargs`` counts for a backend other than
            ``native``, which takes none; those that take one convert rates).
        backend_kwargs: ``dataset.backend_kwargs``.

    Returns:
        ``{"components": [...], "weights": ..., "fps": ...}`` (``fps`` ``None``: each component's own rate), a text
        that is not a readable mixture as ``{"text": ...}``, or ``None`` without a mixture.
    """
    if mixture is None or (isinstance(mixture, str) and not mixture.strip()):
        return None
    doc = mixture
    if isinstance(mixture, str):
        try:
            doc = json.loads(mixture)
        except ValueError:
            return {"text": mixture.strip()}
    if isinstance(doc, list):
        doc = {"components": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("components"), list):
        return {"text": str(mixture)}
    fps = doc.get("target_fps")
    if fps is None and (backend or DEFAULT_BACKEND) != DEFAULT_BACKEND and isinstance(backend_kwargs, dict):
        fps = backend_kwargs.get("target_fps")
    return {
        "components": [_component(c) if isinstance(c, dict) else {"entry": c} for c in doc["components"]],
        "weights": doc.get("weights") or "given",
        "fps": None if fps is None else float(fps),
        "pad": dict(doc.get("pad") or {}),
        "missing_cameras": doc.get("missing_cameras") or "drop",
    }


def _value(field: str, value) -> str:
    if value is None:
        return {"episodes": "all", "weight": "none", "root": "LeRobot's default"}.get(field, "none")
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def mixture_differences(saved: dict, now: dict) -> list[str]:
    """What differs between two mixtures (:func:`served_mixture`), in words.

    Args:
        saved: The mixture the checkpoint trained on.
        now: The run's.

    Returns:
        One phrase per difference, in the components' order; empty when they serve the same data.
    """
    if "text" in saved or "text" in now:
        return [] if saved == now else [f"{_mixture_words(saved)}, now {_mixture_words(now)}"]
    out = []
    before, after = saved["components"], now["components"]
    for k in range(max(len(before), len(after))):
        if k >= len(after):
            out.append(f"component {k} ({before[k].get('repo_id')}) left out")
        elif k >= len(before):
            out.append(f"component {k} ({after[k].get('repo_id')}) added")
        else:
            out += [
                f"component {k} ({before[k].get('repo_id')}) {field} {_value(field, before[k].get(field))}, now "
                + _value(field, after[k].get(field))
                for field in ("repo_id", "root", "weight", "episodes", "rename", "drop")
                if before[k].get(field) != after[k].get(field)
            ]
    if saved["weights"] != now["weights"]:
        out.append(f"weights were {saved['weights']!r}, now {now['weights']!r}")
    if saved.get("pad") != now.get("pad"):
        out.append(f"pad was {_value('pad', saved.get('pad'))}, now {_value('pad', now.get('pad'))}")
    if saved.get("missing_cameras", "drop") != now.get("missing_cameras", "drop"):
        out.append(f"missing_cameras were {saved.get('missing_cameras')!r}, now {now.get('missing_cameras')!r}")
    if saved["fps"] != now["fps"]:
        out.append(f"served at {_rate(saved['fps'])}, now {_rate(now['fps'])}")
    return out


def _rate(fps: float | None) -> str:
    return "each component's own rate" if fps is None else f"{fps:g} fps"


def _mixture_words(mixture: dict) -> str:
    if "text" in mixture:
        return f"the mixture {mixture['text']!r}"
    names = some_of(str(c.get("repo_id")) for c in mixture["components"])
    return f"a mixture of {len(mixture['components'])} ({names})"


def _dataset_words(repo_id, root) -> str:
    return f"one dataset ({repo_id}{f' at {root}' if root else ''})"


def pass_order(backend: str | None, backend_kwargs) -> str:
    """How a mixture's passes are ordered on a backend, in words: by unit for the backends whose passes are
    pipelines (the ``batch`` kind: ``mixtures.sampling.MixtureOrder``'s ``units``, with their ``shuffle_buffer``),
    else in the order drawn.

    Args:
        backend: ``dataset.backend`` (``None``: the default).
        backend_kwargs: ``dataset.backend_kwargs``.

    Returns:
        ``"in the order drawn"`` or ``"by unit (shuffle_buffer N)"`` (the backend's default when not given).
    """
    from robo_loaders_plugin.core.registry import get_backend
    from robo_loaders_plugin.core.spec import BATCH

    try:
        spec = get_backend(backend or DEFAULT_BACKEND)
        kind = spec.kind_for("lerobot")
    except Exception:  # noqa: BLE001 - an unknown backend is refused by the run itself, with its own line
        return DRAWN
    if kind != BATCH:
        return DRAWN
    buffer = backend_kwargs.get("shuffle_buffer") if isinstance(backend_kwargs, dict) else None
    if buffer is None and "shuffle_buffer" in spec.options:  # the default, as a value: the same order given so
        buffer = spec.options["shuffle_buffer"].default_for("lerobot")
    return f"by unit (shuffle_buffer {'default' if buffer is None else buffer})"


def recorded_order(checkpoint) -> str | None:
    """The order a checkpoint's mixture passes were served in, as its run recorded it (``pass_order`` in
    ``pretrained_model/component_stats.json``, :func:`lerobot.mixture.save_component_stats`).

    Why recorded, not derived from the checkpoint's backend: the rules change between versions. Every version
    before the record served every backend's mixture in the order drawn, so a checkpoint without it (no file, or a
    file without the key) was served so, whatever its backend serves now.

    Args:
        checkpoint: The checkpoint's directory.

    Returns:
        The recorded :func:`pass_order`, else ``None``.
    """
    from lerobot.utils.constants import PRETRAINED_MODEL_DIR

    path = os.path.join(str(checkpoint), PRETRAINED_MODEL_DIR, COMPONENT_STATS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            order = json.load(f).get("pass_order")
    except (OSError, ValueError, AttributeError):
        order = None
    return order if isinstance(order, str) else None


def warn_resized(checkpoint, now: list[tuple[str, int, int]]) -> list[str]:
    """Say when a resumed mixture's components hold other frame or episode counts than its checkpoint's run served
    (a component rewritten in place under the same root: the flags :func:`check_resumed_dataset` compares are the
    same). The passes are ordered over the components' sizes, so the resumed step is a batch of another order, on
    other episodes, and the checkpoint's normalisation statistics are the old data's; a reviewer's reproduction
    resumed on 113 frames where the checkpoint trained on 48, without a word. Said, not refused: LeRobot resumes one
    edited dataset so too.

    Args:
        checkpoint: The checkpoint's directory.
        now: ``(name, frames, episodes)`` of each component, as this run serves them.

    Returns:
        The differences said (``[]``: none, or the checkpoint records no sizes: an earlier version's).
    """
    from lerobot.utils.constants import PRETRAINED_MODEL_DIR

    from robo_loaders_plugin.core.log import get_logger

    path = os.path.join(str(checkpoint), PRETRAINED_MODEL_DIR, COMPONENT_STATS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f).get("components")
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(saved, list) or len(saved) != len(now):
        return []
    differences = []
    for k, (entry, (name, frames, episodes)) in enumerate(zip(saved, now)):
        if not isinstance(entry, dict) or "frames" not in entry:
            continue
        if (entry.get("frames"), entry.get("episodes")) != (frames, episodes):
            differences.append(
                f"component {k} ({name}): {entry.get('frames')} frames in {entry.get('episodes')} episodes at the "
                f"checkpoint, {frames} in {episodes} now"
            )
    if differences:
        more = len(differences) - MAX_LISTED
        what = "; ".join(differences[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
        get_logger(__name__).warning(
            f"warning: {MIXTURE_FLAG}: checkpoint {checkpoint} trained on components of other sizes ({what}): "
            "edited since, so the resumed step is a batch of another order on other episodes, and the checkpoint's "
            "normalisation statistics are those of the data it trained on; train on the edited data as a new run "
            "(another --output_dir, without --resume) to start from its own"
        )
    return differences


def _warn_order_change(dataset, checkpoint) -> None:
    """Say when a mixture resumed on the same data is ordered another way than its checkpoint's run: the pass it
    stopped in continues at the same batch of another order, so until that pass ends some of its windows are
    served twice and others not at all (the next passes are whole)."""
    from robo_loaders_plugin.core.log import get_logger

    recorded = recorded_order(checkpoint)
    before = recorded or DRAWN
    after = pass_order(getattr(dataset, "backend", None), getattr(dataset, "backend_kwargs", None))
    if before != after:
        if recorded is None:
            before += " (the checkpoint records no order: robo-loaders served every mixture so before it recorded one)"
        get_logger(__name__).warning(
            f"warning: {MIXTURE_FLAG}: checkpoint {checkpoint} trained on this mixture with its passes served "
            f"{before}, this run serves them {after} (--dataset.backend, shuffle_buffer): the pass it stopped in "
            "continues at the same batch of another order, so until that pass ends some of its windows are served "
            "twice and others not at all; resume on the checkpoint's backend and options to continue it exactly"
        )


def check_resumed_dataset(cfg) -> None:
    """Refuse a resumed run given other data than its checkpoint trained on: another mixture (components, roots,
    weights, episodes, renames, the rate served at), a mixture where it trained on one dataset, or one dataset where
    it trained on a mixture. Nothing is read but the checkpoint's ``train_config.json``.

    Args:
        cfg: lerobot-train's config, validated (``cfg.resume``; ``cfg.checkpoint_path``, which LeRobot's
            ``validate`` sets from ``--config_path``).

    Raises:
        MixtureError: one line naming ``--dataset.mixture``, the checkpoint, what differs and what to do.
    """
    from robo_loaders_plugin.mixtures.spec import MixtureError

    checkpoint = getattr(cfg, "checkpoint_path", None)
    if not getattr(cfg, "resume", False) or checkpoint is None:
        return
    saved = saved_dataset(checkpoint)
    if saved is None:
        return
    dataset = cfg.dataset
    before = served_mixture(saved.get("mixture"), saved.get("backend"), saved.get("backend_kwargs"))
    after = served_mixture(
        getattr(dataset, "mixture", None), getattr(dataset, "backend", None), getattr(dataset, "backend_kwargs", None)
    )
    if before is None and after is None:
        return  # one dataset, as LeRobot resumes it
    if before is not None and after is not None:
        differences = mixture_differences(before, after)
        if not differences:
            _warn_order_change(dataset, checkpoint)
            return
        more = len(differences) - MAX_LISTED
        what = "; ".join(differences[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
        trained = f"another mixture ({what})"
    elif before is not None:
        trained = f"{_mixture_words(before)}, and this run gives {_dataset_words(dataset.repo_id, dataset.root)}"
    else:
        trained = (
            f"{_dataset_words(saved.get('repo_id'), saved.get('root'))}, and this run gives {_mixture_words(after)}"
        )
    raise MixtureError(
        f"{MIXTURE_FLAG}: --resume=true continues checkpoint {checkpoint} at its step, but it trained on {trained}; "
        f"resume on what it trained on (give no {DATASET_FLAGS}: its train_config.json holds them), or train on "
        "this data as a new run (another --output_dir, without --resume)"
    )
