"""Imported by LeRobot when a user runs ``lerobot-train --dataset.discover_packages_path=robo_loaders_plugin``
(LeRobot imports the package and each of its direct submodules before parsing the command line): applies the
LeRobot patches so ``--dataset.backend`` parses even with the import hook disabled (``ROBO_LOADERS_DISABLE=1``)."""
import sys

if "lerobot" in sys.modules:  # only inside a LeRobot process; importing the plugin elsewhere patches nothing
    from robo_loaders_plugin.lerobot.patches import apply_all

    apply_all()
