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


def close_matches(typed: str, candidates, n: int = 4) -> list[str]:
    """What a mistyped name may have meant, for "did you mean": ``candidates`` are
    ``(text, label)`` pairs, texts folded as ``typed`` is, and several texts may carry one label
    (a key, its display name, its aliases). Names that begin with what was typed, then names
    that contain it (``qwen3-30b`` is the start of ``qwen3-30b-a3b``: a name cut short, which a
    spelling measure would rank below the shorter ``qwen3-32b``); only when there are none,
    names a few letters away. Each label once, at most ``n``."""
    import difflib

    if not typed:
        return []
    pairs = list(candidates)
    ranked = [label for text, label in pairs if text.startswith(typed)] + [
        label for text, label in pairs if typed in text
    ]
    if not ranked:
        near = difflib.get_close_matches(typed, list(dict.fromkeys(t for t, _ in pairs)), n=n, cutoff=0.6)
        ranked = [label for text in near for t, label in pairs if t == text]
    return list(dict.fromkeys(ranked))[:n]
