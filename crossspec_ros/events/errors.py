"""Errors raised when a source of events (bag, file) cannot be read.

The message always names the path and says what to do; the CLI prints it without a traceback.
"""

from __future__ import annotations


class EventSourceError(Exception):
    """An event source cannot be opened or read (missing, wrong format, corrupt)."""
