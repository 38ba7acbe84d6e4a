"""``--format json``: the whole ``Analysis.to_dict()``, the stable JSON contract."""

from __future__ import annotations

from tracekit.report.base import JsonDocument, register


@register
class JsonRenderer(JsonDocument):
    description = "the whole analysis as JSON (schema_version, stable keys; see docs/json-schema.md)"
