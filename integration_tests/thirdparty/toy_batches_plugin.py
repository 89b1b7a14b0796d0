"""A third-party backend, as an outside package would write it: registered only through the ``robo_loaders``
entry-point group (see the test that installs it), and batch-level, so robomimic's epoch loop must pull whole
batches from its BatchSource instead of from its DataLoader."""

import torch

from robo_loaders_plugin.extend import BATCH, BackendSpec, BatchDataset, BatchSource, Option, Serving, hookimpl


class ToyBatches(BatchDataset):
    def __init__(self, inner, tag):
        super().__init__(serving=Serving(f"toy batches over SequenceDataset, tag={tag}"))
        self.inner = inner  # robomimic's own SequenceDataset
        self.batches_served = 0

    def __len__(self):
        return len(self.inner)

    def __repr__(self):
        return f"ToyBatches({len(self)} samples)"

    def batch_source(self, plan):
        outer = self

        class Passes(BatchSource):
            def __init__(self):
                super().__init__(plan.start_epoch, plan.start_batch)
                self.loader = torch.utils.data.DataLoader(
                    outer.inner, batch_size=plan.batch_size, shuffle=plan.shuffle, drop_last=plan.drop_last
                )

            def __len__(self):
                return len(self.loader)

            def batches(self, epoch, start=0):
                for i, b in enumerate(self.loader):
                    if i >= start:
                        outer.batches_served += 1
                        print(f"[toy_batches] batch {outer.batches_served}", flush=True)
                        yield b

        return Passes()


def make(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    from robo_loaders_plugin.extend import robomimic_sequence_dataset

    return ToyBatches(robomimic_sequence_dataset(config, obs_keys, filter_by_attribute, dataset_path), options.tag)


@hookimpl
def robo_loaders_backends():
    return [
        BackendSpec(
            name="toy_batches",
            description="test-only batch-level backend",
            frameworks=("robomimic",),
            kind=BATCH,
            factories={"robomimic": make},
            options={"tag": Option(str, "none", "a label")},
        )
    ]
