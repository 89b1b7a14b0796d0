"""Imported by LeRobot when a user runs ``lerobot-train --dataset.discover_packages_path=robo_loaders_plugin``
(LeRobot imports the package and each of its direct submodules before parsing the command line): applies the
LeRobot patches so ``--dataset.backend`` parses even with the import hook disabled (``ROBO_LOADERS_DISABLE=1``),
and has the plugin's errors that end the run printed as one line, as the import hook's path does
(``core.errors.install_one_line_excepthook``: ``lerobot-train``'s ``train`` is running already, so its patch does
not see this command line)."""

import sys

if "lerobot" in sys.modules:  # only inside a LeRobot process; importing the plugin elsewhere patches nothing
    from robo_loaders_plugin.lerobot.patches import apply_all

    apply_all()
    from robo_loaders_plugin.lerobot.compat import train_script

    if train_script() is not None:  # the training script's command line is being parsed
        from robo_loaders_plugin.core.errors import install_one_line_excepthook
        from robo_loaders_plugin.lerobot.integration import check_command_line

        # checked as the hook's route checks it, before LeRobot's parser reads it as YAML: malformed JSON in
        # --dataset.backend_kwargs or --dataset.mixture was a YAML traceback on this route (a reviewer's
        # reproduction). LeRobot's parser holds its own copy of the command line by now, so an empty value cannot
        # be handed on as no options here (docs/lerobot.md)
        check_command_line(sys.argv[1:])

        install_one_line_excepthook()
