"""Running the user's own script in-process, under the profiler (``tracekit collect -- python x.py``)."""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Sequence, cast

from tracekit.errors import TracekitError


@dataclass(frozen=True)
class ScriptTarget:
    """What to run: a file (``path``) or a module (``module``, as ``python -m``), and its argv."""

    argv: tuple[str, ...]  # sys.argv as the script sees it
    path: str | None = None
    module: str | None = None

    @property
    def label(self) -> str:
        return self.path if self.path is not None else f"-m {self.module}"

    @property
    def stem(self) -> str:
        if self.path is not None:
            return os.path.splitext(os.path.basename(self.path))[0] or "script"
        return (self.module or "script").rsplit(".", 1)[-1]


def _is_python(word: str) -> bool:
    base = os.path.basename(word)
    return base.startswith("python") or os.path.abspath(word) == os.path.abspath(sys.executable)


def parse_command(command: Sequence[str]) -> ScriptTarget:
    """``["python", "x.py", "--flag"]``, ``["x.py", ...]`` or ``["python", "-m", "pkg.mod", ...]``."""
    words = list(command)
    if words and _is_python(words[0]) and not words[0].endswith(".py"):
        words = words[1:]
        # python's own options before the script (-u, -O, ...) are accepted and ignored
        while words and words[0].startswith("-") and words[0] != "-m":
            words = words[1:]
    if not words:
        raise TracekitError("no script to run: give one as `tracekit collect -- python my_script.py [args]`")
    if words[0] == "-m":
        if len(words) < 2:
            raise TracekitError("`-m` needs a module name, as in `tracekit collect -- python -m my_package.serve`")
        return ScriptTarget(argv=(words[1], *words[2:]), module=words[1])
    path = words[0]
    if not os.path.isfile(path):
        raise TracekitError(
            f"script {path} does not exist (tracekit collect runs a Python file: -- python my_script.py)"
        )
    if not path.endswith(".py") and not os.access(path, os.R_OK):
        raise TracekitError(f"script {path} is not a readable Python file")
    return ScriptTarget(argv=(path, *words[1:]), path=os.path.abspath(path))


def run_target(target: ScriptTarget) -> float:
    """Run the script as ``__main__`` in this process; returns its wall time in ms.

    A ``SystemExit(0)`` counts as success; any other exit status or exception raises
    ``TracekitError`` (the script's traceback is printed first, since it is the user's code).
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = list(target.argv)
    if target.path is not None:
        sys.path.insert(0, os.path.dirname(target.path))
    else:
        sys.path.insert(0, os.getcwd())
    t0 = time.perf_counter()
    try:
        if target.path is not None:
            runpy.run_path(target.path, run_name="__main__")
        else:
            # (a target without a path names a module)
            runpy.run_module(cast(str, target.module), run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        if code not in (None, 0):
            # sys.exit("message") exits with status 1 and prints the message.
            how = f"with status {code}" if isinstance(code, int) else f"with status 1 ({code})"
            raise TracekitError(f"{target.label} exited {how}; no trace written") from None
    except ImportError as e:
        if target.module is not None and getattr(e, "name", None) == target.module:
            raise TracekitError(f"no module named {target.module!r} to run") from None
        traceback.print_exc()
        raise TracekitError(f"{target.label} raised {type(e).__name__}: {e}; no trace written") from None
    except Exception as e:  # noqa: BLE001 - the user's code failed; show its traceback, then one sentence
        traceback.print_exc()
        raise TracekitError(f"{target.label} raised {type(e).__name__}: {e}; no trace written") from None
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
    return (time.perf_counter() - t0) * 1e3
