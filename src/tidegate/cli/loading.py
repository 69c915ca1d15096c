"""Finding the user's `tidegate.App` from a `MODULE:APP` string.

The worker runs the user's code, so it imports it the way the user would:
the current directory comes first on `sys.path`. Every way this can go wrong
(no such module, the module itself fails, no such attribute, not an App)
becomes one sentence that says which.
"""

from __future__ import annotations

import importlib
import os
import sys

from tidegate.app import App
from tidegate.bootstrap import DATABASE_ENV, masked
from tidegate.cli.errors import CommandError
from tidegate.domain.errors import TidegateError


def load_app(target: str) -> App:
    module_name, _, attribute = target.partition(":")
    attribute = attribute or "app"
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise CommandError(f"{target!r} is not MODULE:APP (e.g. tasks:app or myproject.jobs:app)")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise CommandError(
                f"cannot import {module_name!r}: no such module (looked in {cwd} and the environment)"
            ) from None
        raise CommandError(f"importing {module_name!r} failed: {error}") from None
    except TidegateError:
        raise  # e.g. the module builds an App with a malformed URL: already a clear message
    except Exception as error:
        raise CommandError(f"importing {module_name!r} failed: {type(error).__name__}: {error}") from None
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise CommandError(f"module {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, App):
        raise CommandError(f"{module_name}:{attribute} is a {type(found).__name__}, not a tidegate.App")
    return found


def load_app_for(target: str | None, database: str | None) -> App:
    """The user's App with `--database` applied, or a bare App on it when no MODULE:APP is given.

    An app built with `App()` reads $TIDEGATE_DATABASE when its module is
    imported, so `--database` is exported first. An app built with an explicit
    URL keeps it; if `--database` names another, refuse rather than serve one
    database while the operator believes another.
    """
    if target is None:
        return App(database)
    if database:
        os.environ[DATABASE_ENV] = database
    app = load_app(target)
    if database and app.database != database:
        raise CommandError(
            f"{target} was built with database {masked(app.database)!r}, "
            f"but --database/{DATABASE_ENV} is {masked(database)!r}: "
            "build the app with App() to take it from the command line, or drop the option"
        )
    return app
