"""What a test needs from the machine, and what happens when it is missing.

On a developer's machine a missing optional tool or package skips the test that needs
it. In CI (CI=true, as .ci/run runs), scripts/deps.sh has installed all of them
(requirements-dev.txt, the Debian packages), so a missing one is a broken install and
fails the test instead of skipping it quietly.
"""
from __future__ import annotations

import importlib
import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def skip_unless_ci(reason: str) -> None:
    """pytest.skip(reason) outside CI; pytest.fail(reason) in CI."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: scripts/deps.sh should have installed it)", pytrace=False)
    pytest.skip(reason)


def require_module(name: str, install: str):
    """The imported module; when it cannot be imported: skip outside CI, fail in CI.
    install says how to get it (e.g. 'pip install jinja2')."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        skip_unless_ci(f"python module {name} not importable ({e}); {install}")
