"""Shared fixtures for the Python tests (pytest tests/python).

The tests import tools/write_test_model.py and tools/numpy_ref.py as modules.
The inferd binary is taken from $INFERD_BIN, else <repo>/build/inferd; a test
that needs it fails (not skips) when it is missing.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools"
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

SHARED_MODELS = Path(os.environ.get("INFERD_SHARED_MODELS", REPO_ROOT.parent / "shared" / "models"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_models() -> Path:
    """<repo>/../shared/models (the trained Shakespeare fixtures); fails when absent."""
    d = SHARED_MODELS
    if not d.is_dir():
        pytest.fail(f"shared model directory {d} not found (set INFERD_SHARED_MODELS)")
    return d


@pytest.fixture(scope="session")
def inferd_bin() -> Path:
    env = os.environ.get("INFERD_BIN")
    p = Path(env) if env else REPO_ROOT / "build" / "inferd"
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(f"inferd binary not found or not executable: {p} "
                    "(build it, e.g. cmake -S . -B build && cmake --build build, or set INFERD_BIN)")
    return p


@pytest.fixture
def work_dir(tmp_path) -> Path:
    """A fresh temporary directory for the test's model files."""
    return tmp_path
