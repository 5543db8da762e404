"""Fixtures of the report tests (data builders live in report_data.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from report_data import build_results


@pytest.fixture
def results() -> pd.DataFrame:
    return build_results()
