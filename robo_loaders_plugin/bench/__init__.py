"""What a user runs to measure their own loader: ``robo-loaders bench robomimic|lerobot`` (every backend in its own
subprocess, in one run, with ratios to native) and ``robo-loaders report`` (plots and a markdown page). The
project's own benchmark tooling (matrix, decoder alone, training benchmark, README tables) is ``benchmarks/harness``
in the repository, not part of the package."""
