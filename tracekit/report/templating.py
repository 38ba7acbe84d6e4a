"""The Jinja2 environments and filters every template renderer shares.

HTML is rendered with ``autoescape=True``: everything from a trace (kernel names,
annotations, file names) is untrusted and reaches the page only escaped. Data for
scripts goes through ``script_json``, which escapes ``<``, ``>``, ``&`` and the JS
line separators, so no string can close a ``<script>`` element or open a comment.
Markdown and terminal text have their own environment without HTML escaping and
explicit filters instead.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from tracekit import formatting as fmt

_PACKAGE = Path(__file__).resolve().parent.parent


def template_dirs() -> list[str]:
    """Where templates live: inside the installed package (the wheel's
    ``tracekit/templates``), else the repository's top-level ``templates/`` (an
    editable checkout)."""
    candidates = [_PACKAGE / "templates", _PACKAGE.parent / "templates"]
    found = [str(p) for p in candidates if (p / "report.html.j2").is_file()]
    if not found:  # pragma: no cover - a broken install
        raise RuntimeError(f"tracekit's report templates are missing (looked in {', '.join(map(str, candidates))})")
    return found


_SCRIPT_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_SCRIPT_TABLE = str.maketrans(_SCRIPT_ESCAPES)


def script_json(value: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">``: ``</script>``, ``<!--``
    and U+2028/2029 cannot appear in the output; ``JSON.parse`` restores the text."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return Markup(text.translate(_SCRIPT_TABLE))


# --- Markdown: text that renders as itself on GitHub and chat -------------------------

_MD_SPECIAL = set("\\`*_[]<>|~&")


def md_text(value: Any) -> str:
    """Plain text for a Markdown paragraph or table cell: markup characters escaped,
    newlines folded, HTML impossible (``<`` is escaped)."""
    s = " ".join(str(value).split())
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in s)


def md_code(value: Any) -> str:
    """A code span for a name (kernel, op) in a Markdown table: backticks cannot close
    it early, ``|`` cannot split the table row."""
    s = " ".join(str(value).split())
    run = longest = 0
    for c in s:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    body = s.replace("|", "\\|")
    return f"{fence}{pad}{body}{pad}{fence}"


def term_text(value: Any) -> str:
    """Text for a terminal: control characters (escape sequences) from a trace removed."""
    return "".join(c if c.isprintable() else "?" for c in " ".join(str(value).split()))


def capitalize_first(value: Any) -> str:
    s = str(value)
    return s[:1].upper() + s[1:]


def _filters() -> dict[str, Any]:
    return {
        "capitalize_first": capitalize_first,
        "num": fmt.num,
        "ms": fmt.ms,
        "pct": fmt.pct,
        "count": fmt.count,
        "flops": fmt.flops,
        "bandwidth": fmt.bandwidth,
        "md": md_text,
        "md_code": md_code,
        "term": term_text,
    }


def _env(autoescape: bool, **options: Any) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dirs()),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        **options,
    )
    env.filters.update(_filters())
    return env


@functools.lru_cache(maxsize=None)
def html_env() -> jinja2.Environment:
    env = _env(autoescape=True)
    env.filters["script_json"] = script_json
    return env


@functools.lru_cache(maxsize=None)
def text_env() -> jinja2.Environment:
    """For Markdown and terminal text: no HTML escaping; templates apply ``md``/``term``."""
    return _env(autoescape=False, keep_trailing_newline=True)


def render(env: jinja2.Environment, name: str, **context: Any) -> str:
    return env.get_template(name).render(**context)


def inline_script(name: str) -> str:
    """Script template ``name``'s own text, unrendered, for a page to carry inline."""
    env = html_env()
    if env.loader is None:  # pragma: no cover - _env always gives one
        raise RuntimeError("the HTML templates have no loader")
    text = env.loader.get_source(env, name)[0].strip()
    if "</script" in text.lower():  # pragma: no cover
        raise RuntimeError(f"{name} must not contain '</script'")
    return text


__all__ = [
    "html_env",
    "text_env",
    "render",
    "inline_script",
    "script_json",
    "md_text",
    "md_code",
    "term_text",
    "template_dirs",
]
