"""Which sophon the tests import.

By default the repository's copy (python/sophon): this module puts python/
first on ``sys.path``. With ``SOPHON_TEST_INSTALLED=<prefix>`` (set by
python/tests/run-installed.sh) nothing is added, so ``import sophon``
finds the copy pip installed, which :func:`check` requires to lie under
``<prefix>`` (a venv) and not in the repository.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
INSTALLED = os.environ.get("SOPHON_TEST_INSTALLED", "")

if not INSTALLED:
    sys.path.insert(0, PYTHON_DIR)


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def check(module):
    """Raises AssertionError when ``module`` (sophon) is not the copy asked for."""
    where = module.__file__
    if INSTALLED:
        assert _inside(where, INSTALLED) and not _inside(where, PYTHON_DIR), \
            f"sophon imported from {where}, want the copy installed under {INSTALLED}"
    else:
        assert _inside(where, PYTHON_DIR), f"sophon imported from {where}, want {PYTHON_DIR}"
