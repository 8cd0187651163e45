"""Hooks pytest-restore adds to pytest."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .eviction import PolicyRegistry


@pytest.hookspec
def pytest_restore_register_policies(registry: PolicyRegistry, config: pytest.Config) -> None:
    """Add eviction policies to the audit.

    Implement it in a ``conftest.py`` (the root one, or the one beside the
    grid you run) or in a plugin, and call ``registry.register(MyPolicy())``.
    A registered policy joins the grid unless ``--restore-policies`` names
    the policies to run.
    """
