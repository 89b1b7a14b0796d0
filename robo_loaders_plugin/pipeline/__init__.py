"""The torchdata.nodes pipeline of the pipeline-served (``batch`` kind) backends: a batch plan, parallel assembly,
prefetch; framework-neutral."""
