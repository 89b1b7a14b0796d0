"""The harness's tests: the datasets and environment are the root conftest.py's; the fake benchmark rows are the
package tests' (tests/report_fakes.py, the formats ``robo-loaders bench`` writes)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests"))
