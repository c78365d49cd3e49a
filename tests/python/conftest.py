"""Shared setup for the pagedkv Python tests (run with PYTHONPATH=build/python)."""

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
# The kvcache-peer-v1 generator and replay driver live with the benchmark that times them.
sys.path.insert(0, str(REPO / "benchmarks" / "python"))


def shared_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("PAGEDKV_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture
def shared():
    """../shared (or PAGEDKV_SHARED_DIR); the test is skipped when it is absent."""
    path = shared_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (set PAGEDKV_SHARED_DIR)")
    return path
