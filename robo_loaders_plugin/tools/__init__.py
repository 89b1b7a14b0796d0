"""Command-line tools that prepare data for the backends but are not backends or sources themselves (registered as
``robo-loaders`` subcommands in ``cli.py``): ``transcode`` (an H.264/HEVC copy of a LeRobot dataset for NVDEC)."""
