"""The installed package is the repository's: every file of python/sophon
that a wheel ships, with the same bytes (run-installed.sh runs this against
the venv; the repository run skips it)."""

import os
import unittest

import sophon
from sophonpath import INSTALLED, PYTHON_DIR

SOURCE = os.path.join(PYTHON_DIR, "sophon")


def shipped(folder):
    """The package's files under folder, relative: modules and py.typed, no caches."""
    out = set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith(".py") or f == "py.typed":
                out.add(os.path.relpath(os.path.join(root, f), folder))
    return out


class InstalledTest(unittest.TestCase):

    @unittest.skipUnless(INSTALLED, "checks the pip-installed copy (python/tests/run-installed.sh)")
    def test_installed_files_are_the_repositorys(self):
        installed = os.path.dirname(os.path.abspath(sophon.__file__))
        want, got = shipped(SOURCE), shipped(installed)
        self.assertIn("__init__.py", want)
        self.assertEqual(got, want, "the installed package's files differ from python/sophon's")
        for name in sorted(want):
            with open(os.path.join(SOURCE, name), "rb") as a, open(os.path.join(installed, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), f"installed {name} differs from python/sophon/{name}")


if __name__ == "__main__":
    unittest.main()
