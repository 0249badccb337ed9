"""platform rules."""

from __future__ import annotations
