"""A third-party backend, as an outside package would write it: registered only through the ``robo_loaders``
entry-point group (see the test that installs it), and batch-level, so robomimic's epoch loop must pull whole
batches from it instead of from its DataLoader."""
import torch

from robo_loaders_plugin import hookimpl
from robo_loaders_plugin.batch_dataset import BatchDataset
from robo_loaders_plugin.spec import BATCH, BackendSpec


class ToyBatches(BatchDataset):
    backend_name = "toy_batches"

    def __init__(self, inner):
        self.inner = inner  # robomimic's own SequenceDataset
        self.batches_served = 0

    def __len__(self):
        return len(self.inner)

    def __repr__(self):
        return f"ToyBatches({len(self)} samples)"

    def batches(self, batch_size, shuffle, drop_last, num_workers):
        outer = self

        class Epoch:
            def __len__(self):
                return len(self.loader)

            def __init__(self):
                self.loader = torch.utils.data.DataLoader(outer.inner, batch_size=batch_size, shuffle=shuffle,
                                                          drop_last=drop_last, num_workers=0)

            def __iter__(self):
                for b in self.loader:
                    outer.batches_served += 1
                    print(f"[toy_batches] batch {outer.batches_served}", flush=True)
                    yield b

        return Epoch()


def make(config, obs_keys, filter_by_attribute=None, dataset_path=None, tag="none"):
    from robo_loaders_plugin.robomimic.factories import native_dataset

    ds = ToyBatches(native_dataset(config, obs_keys, filter_by_attribute, dataset_path))
    ds.build_summary = f"toy batches over SequenceDataset, tag={tag}"
    return ds


@hookimpl
def robo_loaders_backends():
    return [BackendSpec(name="toy_batches", description="test-only batch-level backend", frameworks=("robomimic",),
                        kind=BATCH, factories={"robomimic": make}, options={"tag": (str, "none", "a label")})]
