import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")  # tests draw figures without a screen
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _course_language_zh():
    """Every test starts and ends with the default language (zh)."""
    from helpers import set_language
    set_language("zh")
    yield
    set_language("zh")
