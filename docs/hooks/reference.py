"""MkDocs hook: the reference pages that are generated from the code at build time.

`reference/cli.md` walks the Typer application's Click commands (their help, arguments and
options), and `reference/http.md` renders the API's own OpenAPI document (also written
beside it as `reference/openapi.json`). Generating them from the code is what keeps them
true: a new command or route appears in the docs by the next build, with no copy to forget.
Both are built offline: nothing here, nor in the theme (`font: false`), loads from the web.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import Any

import typer
import typer.main
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site (they are listed in mkdocs.yml's nav)."""
    spec = _openapi()
    pages = {
        "reference/cli.md": cli_page(),
        "reference/http.md": http_page(spec),
        "reference/openapi.json": json.dumps(spec, indent=2, sort_keys=True),
    }
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


# --- the command line ----------------------------------------------------------------


def cli_page() -> str:
    """Every `tidegate` command with its usage, help, arguments and options."""
    from tidegate.cli.main import app

    root = typer.main.get_command(app)
    lines = [
        "# Command line",
        "",
        "Generated from the `tidegate` Typer application (`tidegate COMMAND --help` prints the same).",
        "Every command takes `--database URL` (env `TIDEGATE_DATABASE`; `sqlite:///path.db` or",
        "`postgresql://...`), and every list and show command takes `--json`.",
        "",
    ]
    for path, command in _commands(root, ("tidegate",)):
        lines.extend(_command_section(path, command))
    return "\n".join(lines) + "\n"


# Typer builds its commands on a private copy of Click (`typer._click`), so they are read by
# their attributes (`commands`, `params`, `param_type_name`), not checked against Click's classes.
Command = Any


def _commands(command: Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Command]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in subcommands.items():
        if not sub.hidden:
            yield from _commands(sub, (*path, name))


def _command_section(path: tuple[str, ...], command: Command) -> list[str]:
    context = command.context_class(command, info_name=" ".join(path))
    usage = " ".join(command.collect_usage_pieces(context))
    lines = [f"## `{' '.join(path[1:])}`", "", "```text", f"{' '.join(path)} {usage}", "```", ""]
    if command.help:
        lines += [_plain(command.help), ""]
    rows = [_param_row(param) for param in command.params if not getattr(param, "hidden", False)]
    rows = [row for row in rows if row is not None]
    if rows:
        lines += ["| argument or option | what it is |", "|---|---|", *rows, ""]
    return lines


def _param_row(param: Any) -> str | None:
    if param.param_type_name == "option":
        if "--help" in param.opts:
            return None
        names = ", ".join(f"`{name}`" for name in (*param.opts, *param.secondary_opts))
        help_text = param.help or ""
        if param.envvar:
            help_text += f" (env `{param.envvar}`)"
        if param.default not in (None, False, (), []) and not callable(param.default):
            help_text += f" [default: `{param.default}`]"
    else:
        names = f"`{(param.metavar or param.name or '').upper()}`"
        help_text = getattr(param, "help", None) or ""
    return f"| {names} | {_cell(help_text)} |"


def _plain(text: str) -> str:
    """Typer's help text as Markdown: Rich markup is not used by the commands, so it is kept as is."""
    return text.replace("\b\n", "").strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# --- the HTTP API --------------------------------------------------------------------


def _openapi() -> dict[str, Any]:
    """The served OpenAPI document, built over an app on a throwaway SQLite file."""
    from tidegate import App
    from tidegate.api.application import create_api

    with tempfile.TemporaryDirectory() as folder:
        app = App(database=f"sqlite:///{folder}/docs.db")
        try:
            return create_api(app).openapi()
        finally:
            app.close()


def http_page(spec: dict[str, Any]) -> str:
    """Each route with its summary, description, parameters, body and answers, by tag."""
    lines = [
        "# HTTP API",
        "",
        "Generated from the server's own OpenAPI document ([download it](openapi.json); a running",
        "`tidegate serve` serves it at `/api/v1/openapi.json` and renders it at `/api/docs`, offline).",
        'Errors are `{"error", "detail", "field"}`; see [the HTTP service](../how-to/http-service.md)',
        "for tokens, origins, streams and the walk-through.",
        "",
    ]
    for method, path, operation in _operations(spec):
        lines.extend(_operation_section(method, path, operation))
    return "\n".join(lines) + "\n"


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec.get("paths", {}).items():
        for method in HTTP_METHODS:
            if method in item:
                yield method, path, item[method]


def _operation_section(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"## `{method.upper()} {path}`", ""]
    if operation.get("summary"):
        lines += [f"**{operation['summary']}**", ""]
    if operation.get("description"):
        lines += [operation["description"].strip(), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | required | what it is |", "|---|---|---|---|"]
        for parameter in parameters:
            required = "yes" if parameter.get("required") else "no"
            about = _cell(parameter.get("description", "") or parameter.get("schema", {}).get("title", ""))
            lines.append(f"| `{parameter['name']}` | {parameter['in']} | {required} | {about} |")
        lines.append("")
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body:
        lines += [f"Body: `{_schema_name(body)}`", ""]
    answers = operation.get("responses", {})
    if answers:
        listed = ", ".join(f"`{code}` {_cell(answer.get('description', ''))}" for code, answer in answers.items())
        lines += [f"Answers: {listed}", ""]
    return lines


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    return str(schema.get("title") or schema.get("type") or "object")
