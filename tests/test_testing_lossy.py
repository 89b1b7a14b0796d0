"""Which fields ``robo_loaders_plugin.testing.assert_same`` lets differ: those ``min_psnr`` names, by whole path
components only."""

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
