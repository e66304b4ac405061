"""Durations on the command line ("500ms", "2s", "5m", "1h", or plain seconds), for every command."""

from __future__ import annotations

import argparse

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds; an argparse error for text that is not a positive duration (a zero period or
    timeout would spin or fail every call)."""
    stripped = text.strip()
    for suffix in ("ms", "s", "m", "h"):
        if stripped.endswith(suffix):
            number, scale = stripped[: -len(suffix)], _UNITS[suffix]
            break
    else:
        number, scale = stripped, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 1s, 500ms, 2m)") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a duration must be positive and finite, got {text!r}")
    return value
