"""Which fields ``robo_loaders_plugin.testing.assert_same`` lets differ (those ``min_psnr`` names, by whole path
components only), and where its message says they differ."""

import numpy as np
import pytest

from robo_loaders_plugin.testing import assert_same

FRAME = np.full((8, 8, 3), 128, np.uint8)
NEAR = FRAME.copy()
NEAR[0, 0, 0] += 1  # one level off: about 70 dB


@pytest.mark.parametrize("name", ["obs/agentview_image", "agentview_image"])
def test_a_name_covers_the_whole_path_or_its_last_components(name):
    sample = {"obs": {"agentview_image": NEAR}}
    assert_same(sample, {"obs": {"agentview_image": FRAME}}, min_psnr={name: 40.0})


@pytest.mark.parametrize("name", ["view_image", "image", "age", "obs/agentview"])
def test_part_of_a_component_does_not_excuse_a_field_from_the_byte_comparison(name):
    """Negative control: a name that is only a substring or suffix of a component leaves the field exact."""
    with pytest.raises(AssertionError, match="obs/agentview_image: values differ"):
        assert_same({"obs": {"agentview_image": NEAR}}, {"obs": {"agentview_image": FRAME}}, min_psnr={name: 40.0})


def test_a_difference_is_named_by_its_element_and_values():
    """One wrong byte: the message names the field, the element (multi-index) and both values; in a batch, the row
    and the dataset index it holds. Byte for byte as before: a NaN equals itself, -0.0 differs from 0.0."""
    with pytest.raises(AssertionError) as failed:
        assert_same({"obs": {"agentview_image": NEAR}}, {"obs": {"agentview_image": FRAME}}, "ds[7]")
    assert str(failed.value) == (
        "ds[7]:obs/agentview_image: values differ at element (0, 0, 0): ours 129, native 128 "
        "(1 of 192 elements differ; max abs diff 1.0)"
    )
    batch, wrong = np.stack([FRAME, FRAME, FRAME]), np.stack([FRAME, FRAME, FRAME])
    wrong[2, 5, 6, 1] = 0
    with pytest.raises(AssertionError) as failed:
        assert_same({"image": wrong}, {"image": batch}, "batch 3", rows=[40, 12, 31])
    assert str(failed.value) == (
        "batch 3:image: values differ at row 2 (index 31), element (5, 6, 1): ours 0, native 128 "
        "(1 of 576 elements differ; max abs diff 128.0)"
    )
    nan = np.array([1.0, np.nan, 0.0])
    assert_same(nan.copy(), nan)  # control: the same bytes, NaN included
    with pytest.raises(AssertionError, match=r"at element \(2,\): ours -0\.0, native 0\.0 \(1 of 3"):
        assert_same(np.array([1.0, np.nan, -0.0]), nan)
    with pytest.raises(AssertionError, match=r"at element \(\): ours 3, native 2 "):
        assert_same(np.array(3), np.array(2))


def test_a_lossy_batch_below_its_floor_names_its_worst_row():
    far = FRAME.copy()
    far[:4] = 0  # half the frame 128 levels off: 9.0 dB
    with pytest.raises(AssertionError) as failed:
        assert_same(np.stack([NEAR, far]), np.stack([FRAME, FRAME]), "batch 0", {"image": 40.0}, "image", rows=[3, 9])
    assert "PSNR 12.0 dB is below the stated 40 dB (lowest at row 1 (index 9): 9.0 dB)" in str(failed.value)
