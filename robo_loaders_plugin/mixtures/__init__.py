"""Weighted mixtures of datasets, framework-neutral: the spec and its parsing (``spec``), the pass order
(``sampling``), the batches (``batches``) and the mixed dataset (``dataset``); the framework adapters build each
component's dataset and say how their items are renamed and joined (docs/mixtures.md)."""
