"""Log set-up for the commands: structlog to stderr, as JSON lines or for people."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    # Looked up at every call, not bound once: whoever replaces sys.stderr (a test runner, a
    # daemon manager) gets the log, and a stream closed since set-up is never written to.
    return structlog.PrintLogger(file=sys.stderr)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stdlib side of the same rule, for the loggers of our dependencies."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        return None


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Route structlog (and the stdlib loggers of our dependencies) to stderr at `level`."""
    numeric = getattr(logging, level.upper(), logging.INFO)
    root = logging.getLogger()
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(max(numeric, logging.WARNING))
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
