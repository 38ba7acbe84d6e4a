"""JUnit XML of ``tracekit compare --fail-if`` gates, for CI systems that show tests per case.

One ``<testsuite name="tracekit compare">`` with one ``<testcase>`` per gate: a failed gate
holds a ``<failure>`` with the gate's sentence, a gate whose figure a run lacks a
``<skipped>``, and every case its sentence (threshold, change, interval) in ``<system-out>``.
Reads the JSON's ``gates[]`` (``Gate.evaluate``) and computes nothing.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import Any, Iterable

from tracekit.errors import TracekitError

SUITE = "tracekit compare"


def junit_xml(gates: list[dict[str, Any]]) -> str:
    """The XML document (a string) of the judged gates."""
    failures = sum(g["verdict"] == "fail" for g in gates)
    skipped = sum(g["verdict"] == "missing" for g in gates)
    root = ET.Element("testsuites", name=SUITE, tests=str(len(gates)), failures=str(failures), skipped=str(skipped))
    suite = ET.SubElement(
        root, "testsuite", name=SUITE, tests=str(len(gates)), failures=str(failures), errors="0", skipped=str(skipped)
    )
    for g in gates:
        case = ET.SubElement(suite, "testcase", name=g["expr"], classname="tracekit.compare." + g["metric"])
        sentence = g.get("sentence") or ""
        if g["verdict"] == "fail":
            ET.SubElement(case, "failure", message=sentence, type="regression").text = sentence
        elif g["verdict"] == "missing":
            ET.SubElement(case, "skipped", message=sentence)
        ET.SubElement(case, "system-out").text = f"{g['verdict']}: {sentence}"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def check_target(path: str, protected: Iterable[str | None]) -> None:
    """Refuse, with one sentence, a JUnit path that is one of the inputs (or the report), or
    whose folder does not exist: checked before the slow reads."""
    for other in protected:
        if other and other != "-" and os.path.abspath(other) == os.path.abspath(path):
            raise TracekitError(f"--junit {path}: that is one of compare's own files; name another file")
        if other and os.path.exists(other) and os.path.exists(path) and os.path.samefile(other, path):
            raise TracekitError(f"--junit {path}: that is one of compare's own files; name another file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise TracekitError(f"--junit {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise TracekitError(f"--junit {path} is a folder; name a file")


def write_junit(gates: list[dict[str, Any]], path: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(junit_xml(gates))
    except OSError as e:
        raise TracekitError(f"--junit {path}: cannot write it ({e.strerror or e})") from None
