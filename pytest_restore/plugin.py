"""The pytest plugin: options, the audit grid and the session report."""

from __future__ import annotations
