"""One item's index, as the frameworks' datasets take it.

Why: the backends' datasets turned whatever they were given into int64 (``int(index)``, ``np.asarray(..., int64)``),
so ``ds[1.5]`` and ``ds[True]`` served item 1 and ``ds[[3, 40]]`` item 3 alone, where ``LeRobotDataset`` and
robomimic's ``SequenceDataset`` raise (a reviewer's reproduction): a loop with a wrong index got an item, silently.
An integer of any kind (Python, numpy, a 0-d tensor) is taken, as ``operator.index`` takes it; anything else is a
``TypeError`` naming the dataset and what it was given.
"""

from __future__ import annotations

import operator


def item_index(index, owner: str) -> int:
    """``index`` as a Python int, when it is an integer.

    Args:
        index: What ``__getitem__`` was given.
        owner: The dataset's class name, for the message.

    Returns:
        The integer (still to be checked against the length, negative ones counting from the end).

    Raises:
        TypeError: a bool (numpy's and torch's too), a float, a slice, a list, or an array or tensor of one
            dimension or more.
    """
    # Python's, numpy's and torch's bools (an index of True is a mask, not item 1), and arrays of one element
    # (a tensor of shape (1,) passes operator.index) are no item index
    boolean = isinstance(index, bool) or str(getattr(index, "dtype", "")) in ("bool", "torch.bool")
    if not boolean and not getattr(index, "ndim", 0):
        try:
            return operator.index(index)
        except TypeError:
            pass
    what = type(index).__name__
    raise TypeError(
        f"{owner} indices must be integers (one item at a time; batches through a DataLoader), got {what} {index!r}"
        if not hasattr(index, "__len__")
        else f"{owner} indices must be integers (one item at a time; batches through a DataLoader), got a {what}"
    )
