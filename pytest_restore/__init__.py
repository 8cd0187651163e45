"""pytest-restore: a restore-counterfactual audit of forgetting in agent memory."""

from __future__ import annotations

__version__ = "0.1.0"
