"""``tracekit models``: the built-in model registry, or what a config resolves to."""

from __future__ import annotations

import json

import click

COLUMNS = ("key", "model", "architecture", "parameters", "source")


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable: each entry's key, name, summary and source.")
@click.option(
    "--show",
    "name",
    metavar="NAME|PATH",
    help="What --model NAME|PATH reads: layers, attention, experts, stored precision, source.",
)
def command(as_json: bool, name: str | None) -> None:
    """List the model architectures `--model` knows (each from a checkpoint's config.json,
    source given), or show what one name, config.json or checkpoint folder resolves to."""
    from tracekit.models import from_config, load_model, registry_entries
    from tracekit.models.costs import parameters

    if name is not None:
        m = load_model(name, option="--show")
        view = {
            "name": m.name,
            "source": m.source,
            "summary": m.summary(),
            "parameters": parameters(m),
            "precision_source": m.precision_source,
        }
        if as_json:
            click.echo(json.dumps(view, indent=2))
        else:
            click.echo(
                f"{m.name}: {m.summary()}\n  {parameters(m) / 1e9:.2f}B parameters\n  "
                f"precision: {m.precision_source}\n  source: {m.source}"
            )
        return
    rows = []
    for e in registry_entries():
        m = from_config(e["config"], e.get("name") or e["key"], e["source"])
        rows.append(
            {
                "key": e["key"],
                "name": m.name,
                "aliases": e.get("aliases", []),
                "summary": m.summary(),
                "parameters": parameters(m),
                "source": e["source"],
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    cells = [(r["key"], r["name"], r["summary"], f"{r['parameters'] / 1e9:.1f}B", r["source"]) for r in rows]
    widths = [max(len(str(c[i])) for c in [COLUMNS, *cells]) for i in range(4)]
    for row in [COLUMNS, *cells]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row[:4], widths)) + "  " + str(row[4]))
    click.echo()
    click.echo(
        "Pass one with --model KEY to any command that analyses a trace (summary, report, compare, project, "
        "annotate, plan), or a config.json / checkpoint folder of your own; "
        "--weights says how a quantised copy stores its weights."
    )
