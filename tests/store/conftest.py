"""Fixtures of the store's tests."""

from __future__ import annotations

import pytest

from approvals.config import Settings


@pytest.fixture
def settings(env: dict[str, str]) -> Settings:
    """The settings of the test's private Redis database."""
    return Settings.from_env()
