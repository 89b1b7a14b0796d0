"""Storage: the frame codec, the compressed episode store (one file, mapped by every process), robo-shards, the
cache directory and the staleness policy. Framework-free."""
