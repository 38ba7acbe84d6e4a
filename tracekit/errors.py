"""The one error type for expected failures.

Anything the user can cause (a bad file, a wrong option, a missing extra) raises
``TracekitError`` with one sentence that names the input and the problem. The CLI
turns it into that sentence on stderr and exit status 2; nothing else in tracekit
should reach the user as a traceback.
"""


class TracekitError(Exception):
    """An expected failure with a message meant for the user."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message
