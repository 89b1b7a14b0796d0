"""Window semantics, one module per framework: which steps of which episode make a sample, as index arrays."""
