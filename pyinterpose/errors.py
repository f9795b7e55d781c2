"""Errors that reach the user as one clear line (never a traceback)."""


class PyinterposeError(Exception):
    """A user-facing error: the CLI prints ``pyinterpose: <message>`` and exits with ``exit_code``."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class TraceError(PyinterposeError):
    """The file is not a readable pyinterpose trace."""
