"""tracekit for coding agents: an MCP server (``tracekit mcp``) whose tools answer questions
about traces in compact JSON. ``cache`` keeps the analyses and confines paths, ``tools`` are the
tool functions (plain Python, no SDK), ``server`` registers them with the ``mcp`` SDK."""
