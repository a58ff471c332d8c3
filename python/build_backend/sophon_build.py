"""setuptools' build backend, with setuptools taken from the installing environment.

pip builds a pyproject.toml project in an isolated environment: it hides the
interpreter's site-packages and installs the ``[build-system] requires``
there from the package index, which fails offline even when the venv (or
Debian's python3-setuptools) has setuptools already. pyproject.toml
therefore requires nothing and names this module as the backend; it puts
the interpreter's site-packages back at the end of ``sys.path`` (what pip
installed into the isolated environment still comes first) and hands every
hook to ``setuptools.build_meta``. Where setuptools or wheel cannot be found
there, the ``get_requires_*`` hooks name them, so pip installs them from the
index as it would have: an online install without them still works.

``pip install --no-build-isolation ./python`` takes the same path.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import site
import sys
from types import ModuleType
from typing import Any, Dict, List, Optional

# setuptools 61 is the first to read [project] from pyproject.toml.
_SETUPTOOLS = "setuptools>=61"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _restore_site_packages() -> None:
    """Appends the interpreter's own site-packages (those of the venv, and
    the system's with --system-site-packages) that build isolation removed."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    for path in dirs:
        if path not in sys.path:
            site.addsitedir(path)


def _setuptools() -> Optional[ModuleType]:
    """setuptools.build_meta when a setuptools new enough is importable, else None."""
    _restore_site_packages()
    try:
        version = importlib.metadata.version("setuptools")
        if int(version.split(".")[0]) < 61:
            return None
        # import_module rather than an import statement: setuptools ships no
        # type information (mypy --strict, make typecheck).
        return importlib.import_module("setuptools.build_meta")
    except (ImportError, ValueError):
        return None


def _backend() -> ModuleType:
    build_meta = _setuptools()
    if build_meta is None:
        raise RuntimeError(f"sophon's build needs {_SETUPTOOLS} (apt-get install "
                           "python3-setuptools, or let pip install it from the index)")
    return build_meta


def _missing(requirements: List[str]) -> List[str]:
    """The requirements whose distribution is not installed at all (versions
    are not compared: setuptools asks for a bare ``wheel``)."""
    missing = []
    for requirement in requirements:
        name = _NAME.match(requirement)
        try:
            importlib.metadata.distribution(name.group(0) if name else requirement)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement)
    return missing


def _requires(hook: str, config_settings: Optional[Dict[str, Any]]) -> List[str]:
    build_meta = _setuptools()
    if build_meta is None:
        return [_SETUPTOOLS, "wheel"] if hook != "get_requires_for_build_sdist" else [_SETUPTOOLS]
    return _missing(getattr(build_meta, hook)(config_settings))


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return _requires("get_requires_for_build_wheel", config_settings)


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return _requires("get_requires_for_build_sdist", config_settings)


def get_requires_for_build_editable(
        config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return _requires("get_requires_for_build_editable", config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    return str(_backend().prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def prepare_metadata_for_build_editable(metadata_directory: str,
                                        config_settings: Optional[Dict[str, Any]] = None) -> str:
    return str(_backend().prepare_metadata_for_build_editable(metadata_directory,
                                                              config_settings))


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return str(_backend().build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    return str(_backend().build_editable(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    return str(_backend().build_sdist(sdist_directory, config_settings))
