"""The datapipe backend's torchdata.nodes pipeline: a batch plan, parallel assembly, prefetch; framework-neutral."""
