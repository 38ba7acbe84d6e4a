"""``--format json``: the whole ``Analysis.to_dict()``, the stable JSON contract."""

from __future__ import annotations

import json
from typing import Any

from tracekit.report.base import Renderer, register


@register
class JsonRenderer(Renderer):
    name = "json"
    extension = ".json"
    description = "the whole analysis as JSON (schema_version, stable keys; see docs/json-schema.md)"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def render_data(self, data: dict[str, Any]) -> str:
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
