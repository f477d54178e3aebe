"""``wml site list|show|validate|detect|schema``."""

import json
import os

import typer
from typing_extensions import Annotated

app = typer.Typer(help="Site profiles: the machines wml knows.", no_args_is_help=True, rich_markup_mode=None)


@app.command("list")
def list_sites() -> None:
    """Known sites (bundled, ~/.config/wml/sites, $WML_SITE_PATH) and where each comes from."""
    from rich.console import Console
    from rich.table import Table

    from .registry import known_sites

    table = Table("name", "scheduler", "launcher", "platform", "node", "source")
    for name, known in sorted(known_sites().items()):
        p = known.profile
        node = f"{p.node.cores} cores" + (f", {p.node.gpus} GPUs" if p.node.gpus else "")
        if p.node.detect:
            node = "detected"
        table.add_row(name, p.scheduler, p.launcher, p.platform, node, str(known.source))
    console = Console()
    if not console.is_terminal:    # piped: whole columns, not cut at 80 characters
        console = Console(width=10_000)
    console.print(table)


@app.command()
def show(name: Annotated[str, typer.Argument(help="Site name.")]) -> None:
    """The full profile of a site, as YAML (detected values filled in)."""
    import yaml

    from .registry import get_site
    from .schema import to_builtins

    prof = get_site(name)
    typer.echo(yaml.safe_dump(to_builtins(prof), sort_keys=False).rstrip())


@app.command()
def validate(path: Annotated[str, typer.Argument(help="Site YAML file.")]) -> None:
    """Check a site file against the schema; errors name file, line and key."""
    from .loader import load_site_file

    prof = load_site_file(path, use_cache=False)
    typer.echo(f"{path}: ok (site {prof.name!r}, {prof.scheduler} + {prof.launcher})")


@app.command()
def detect() -> None:
    """Which site wml would use here, and why (--site > $WML_SITE > detection > local)."""
    from .detect import detect_site
    from .registry import DEFAULT_SITE, known_sites

    if os.environ.get("WML_SITE"):
        typer.echo(f"{os.environ['WML_SITE']} (from $WML_SITE)")
        return
    found = detect_site(known_sites())
    if found:
        typer.echo(f"{found.name} ({found.reason})")
    else:
        typer.echo(f"{DEFAULT_SITE} (no site profile matched this host)")


@app.command()
def schema() -> None:
    """The JSON schema of a site file."""
    from .schema import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))
