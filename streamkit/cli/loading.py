"""Finds the App object named on the command line (``module`` or ``module:attribute``)."""
from __future__ import annotations

import importlib
import os
import sys

import click

from ..app import App


def load_app(spec: str) -> App:
    """Import ``module[:attribute]`` from the current directory or sys.path and return its App."""
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise click.ClickException(
                f"cannot import app module '{module_name}': no module named '{exc.name}' "
                "(run from the directory that contains it, or give module:attribute)") from None
        raise click.ClickException(f"importing app module '{module_name}' failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - user code failed to import: say so in one line
        raise click.ClickException(
            f"importing app module '{module_name}' failed: {type(exc).__name__}: {exc}") from None
    if attribute:
        app = getattr(module, attribute, None)
        if not isinstance(app, App):
            raise click.ClickException(f"'{spec}' is not a streamkit App (got {type(app).__name__})")
        return app
    apps = [value for value in vars(module).values() if isinstance(value, App)]
    if len(apps) != 1:
        found = "no App" if not apps else f"{len(apps)} Apps"
        raise click.ClickException(f"module '{module_name}' defines {found}: name one as {module_name}:ATTRIBUTE")
    return apps[0]
