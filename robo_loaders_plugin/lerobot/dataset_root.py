"""Where LeRobot is told to find a dataset (``--dataset.root``, ``--dataset.episodes``, a mixture component's ``root``
and ``episodes``), checked against the dataset's ``meta/info.json`` at argument parsing, before LeRobot reads it.

Why: LeRobot takes a local copy it cannot use (no ``meta/info.json``, no episode, episodes it does not hold) for a
partial download and fetches the dataset from the Hugging Face Hub into it. Without the Hub (``HF_HUB_OFFLINE``, as
this project runs) that ended in a ~200-line traceback (``OfflineModeIsEnabled ... huggingface.co``) naming neither
the option nor the path.

What is refused, and when:

- a root that is a file, a ``meta/info.json`` that is not a LeRobot dataset's, 0 episodes, an episode index the
  dataset does not have (``meta/info.json``'s ``total_episodes``): always. LeRobot keeps the local ``meta/`` it found
  (it downloads the data, never ``meta/`` again), so nothing the Hub holds makes these train.
- a root without ``meta/info.json`` (missing or empty directory): only with the Hub off. With the Hub on it is where
  LeRobot downloads ``repo_id`` to (its documented use of ``root``), for ``native`` as for every backend.
- no ``root`` at all: nothing here (LeRobot's own cache, ``HF_LEROBOT_HOME``, may hold it); if LeRobot then goes to an
  offline Hub, :func:`local_copy_required` turns that into one line when the dataset is built.
"""

from __future__ import annotations

import contextlib
import json
import os

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.lerobot.flags import MIXTURE_FLAG, component_name
from robo_loaders_plugin.sources.lerobot_v3 import is_remote

ROOT_FLAG, EPISODES_FLAG = "--dataset.root", "--dataset.episodes"


def hub_is_off() -> bool:
    """Whether the Hugging Face Hub is off for this process (``HF_HUB_OFFLINE``): LeRobot cannot download then."""
    from huggingface_hub import is_offline_mode

    return bool(is_offline_mode())


def remote_source(choice) -> str | None:
    """The remote URL a backend reads its source from (``BackendSpec.remote_source_option`` set to ``s3://``,
    ``http(s)://``, ``hf://``), else ``None``. With one, ``--dataset.root`` is replaced by a local mirror of its tables
    (``single.remote_tables``).

    Args:
        choice: A LeRobot ``BackendChoice``.
    """
    option = choice.spec.remote_source_option
    url = getattr(choice.options, option) if option else None
    return url if is_remote(url) else None


def check_dataset_root(dataset_cfg, choice) -> None:
    """``--dataset.root`` and ``--dataset.episodes`` of a single dataset (:func:`check_local_dataset`).

    Args:
        dataset_cfg: ``cfg.dataset`` (no mixture).
        choice: Its backend choice: a backend reading a remote source replaces the root (nothing checked).

    Raises:
        SourceError: one line naming the flag, the path and what to do.
    """
    root = getattr(dataset_cfg, "root", None)
    if root is None or remote_source(choice) is not None or is_remote(str(root)):
        return
    root = str(root)
    shown = root if os.path.isabs(root) else f"{root} ({os.path.abspath(root)})"
    check_local_dataset(
        root,
        getattr(dataset_cfg, "repo_id", None) or "the dataset",
        getattr(dataset_cfg, "episodes", None),
        root_label=f"{ROOT_FLAG}={shown}",
        episodes_label=EPISODES_FLAG,
        fix_root=f"point {ROOT_FLAG} at the directory holding the dataset's meta/info.json",
    )


def check_component_roots(spec) -> None:
    """Each mixture component's local ``root`` and its ``episodes`` (:func:`check_local_dataset`); a remote root is
    mirrored and checked when the mixture is built, a component without one is LeRobot's to find.

    Args:
        spec: The ``MixtureSpec``.

    Raises:
        SourceError: one line naming ``--dataset.mixture``, the component (index and repo_id), its root and what to do.
    """
    for k, component in enumerate(spec.components):
        root = None if component.root is None else str(component.root)
        if root is None or is_remote(root):
            continue
        name = f"{MIXTURE_FLAG}: {component_name(spec, k)}"
        check_local_dataset(
            root,
            component.source,
            component.episodes,
            root_label=f"{name}: root {root}",
            episodes_label=f"{name}: episodes",
            fix_root="fix the component's root (the directory holding the dataset's meta/info.json)",
        )


def check_local_dataset(
    root: str, repo_id: str, episodes, *, root_label: str, episodes_label: str, fix_root: str
) -> None:
    """Refuse a local dataset root LeRobot cannot train from, reading only its ``meta/info.json``.

    Args:
        root: The root as LeRobot will read it (relative to the working directory, ``~`` not expanded: LeRobot's
            ``Path(root)``).
        repo_id: The dataset's repo_id (what LeRobot would download).
        episodes: The episode indices asked for, or ``None`` (all).
        root_label: How the messages name the root (``--dataset.root=/data/x``).
        episodes_label: How they name the episodes (``--dataset.episodes``).
        fix_root: What to do about a root holding no dataset.

    Raises:
        SourceError: the root is a file; it holds no ``meta/info.json`` while the Hub is off, or while a folder in
            it does (the parent of the dataset given); ``meta/info.json`` is
            unreadable or lacks ``total_episodes``; the dataset has 0 episodes; ``episodes`` is empty or names an
            episode the dataset does not have.
    """
    if os.path.exists(root) and not os.path.isdir(root):
        raise SourceError(f"{root_label} is a file, not a dataset directory; {fix_root}")
    info_path = os.path.join(root, "meta", "info.json")
    if not os.path.isfile(info_path):
        inside = _datasets_inside(root, repo_id)
        if inside:  # the parent folder of a dataset: LeRobot would download repo_id into it, Hub on or off
            shown = ", ".join(os.path.join(root, name) for name in inside[:3])
            raise SourceError(
                f"{root_label} holds no LeRobot dataset (no meta/info.json) but its folder"
                f"{'s' if len(inside) > 1 else ''} {shown} do{'' if len(inside) > 1 else 'es'}; {fix_root}"
            )
        if not hub_is_off():
            return  # LeRobot downloads repo_id into it
        what = "holds no LeRobot dataset (no meta/info.json)" if os.path.isdir(root) else "does not exist"
        raise SourceError(
            f"{root_label} {what} and the Hugging Face Hub is off (HF_HUB_OFFLINE), so LeRobot cannot download "
            f"{repo_id} into it; {fix_root}, or unset HF_HUB_OFFLINE to have LeRobot download it there"
        )
    try:
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{root_label}: {info_path} is not readable JSON ({exc}); {fix_root}") from None
    total = info.get("total_episodes") if isinstance(info, dict) else None
    if isinstance(total, bool) or not isinstance(total, int):
        raise SourceError(
            f"{root_label}: {info_path} has no total_episodes (got {total!r}): not a LeRobot v3 dataset; {fix_root}"
        )
    if total <= 0:
        raise SourceError(
            f"{root_label}: {repo_id} has 0 episodes ({info_path}: total_episodes {total}), nothing to train on; "
            "record episodes into it (LeRobotDataset.save_episode, then finalize) or choose another dataset"
        )
    if episodes is None:
        return
    episodes = list(episodes)
    if not episodes:
        raise SourceError(f"{episodes_label} is empty; list episodes 0..{total - 1} of {root}, or leave it out (all)")
    outside = [e for e in episodes if not 0 <= int(e) < total]
    if outside:
        raise SourceError(
            f"{episodes_label}: episode {outside[0]} of {episodes} is not in {root}, which has {total} episode"
            f"{'s' if total != 1 else ''} (0..{total - 1}, {info_path}); list only episodes 0..{total - 1}"
        )


def _datasets_inside(root: str, repo_id: str) -> list[str]:
    """The folders in ``root`` holding a LeRobot dataset (``meta/info.json``): ``<root>/<repo_id>`` (LeRobot's own
    layout, ``HF_LEROBOT_HOME/<org>/<name>``: a reviewer's finding) when it does, else its subfolders one and two
    levels down, sorted; none when ``root`` is not a directory."""
    if repo_id and os.path.isfile(os.path.join(root, repo_id, "meta", "info.json")):
        return [repo_id]
    try:
        names = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    except OSError:
        return []
    deeper = []
    for n in names:
        with contextlib.suppress(OSError):
            deeper += [f"{n}/{m}" for m in sorted(os.listdir(os.path.join(root, n)))]
    return [n for n in names + deeper if os.path.isfile(os.path.join(root, n, "meta", "info.json"))]


@contextlib.contextmanager
def local_copy_required(repo_id: str, root, where: str, root_setting: str = ROOT_FLAG):
    """Turn LeRobot going to an offline Hub (``huggingface_hub``'s ``OfflineModeIsEnabled``) while it builds a dataset
    into one line naming the dataset and what to do: what :func:`check_local_dataset` could not see before (no
    ``root``, a copy whose data or video files are missing).

    Args:
        repo_id: The dataset's repo_id.
        root: The root given (``None``: LeRobot's cache, ``HF_LEROBOT_HOME``).
        where: The setting naming the dataset (``--dataset.repo_id=x``, a mixture's component).
        root_setting: The setting that gives the root (``--dataset.root``, a component's ``root``).

    Raises:
        SourceError: LeRobot tried to download with the Hub off.
    """
    from huggingface_hub.errors import OfflineModeIsEnabled

    try:
        yield
    except OfflineModeIsEnabled as exc:
        said = str(exc).split(". ", 1)[0]  # "Cannot reach <url>: offline mode is enabled", without its advice
        if root is None:
            from lerobot.utils.constants import HF_LEROBOT_HOME

            where_not = f"no local copy of {repo_id} (not in {HF_LEROBOT_HOME / repo_id}, HF_LEROBOT_HOME)"
            fix = f"give {root_setting} (the directory holding its meta/, data/ and videos/)"
        else:
            where_not = f"no complete copy of {repo_id} in {root} (meta/, data/ and videos/)"
            fix = f"point {root_setting} at a complete copy"
        raise SourceError(
            f"{where}: LeRobot found {where_not} and went to the Hugging Face Hub, which is off (HF_HUB_OFFLINE; "
            f"{said}); {fix}, or unset HF_HUB_OFFLINE to download it"
        ) from None
