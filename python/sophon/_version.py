"""The client's version: the one place it is written.

``sophon.__version__``, the ``client`` field of HELLO (``sophon-python/<version>``) and the
installed package's metadata (python/pyproject.toml reads this file) all come from here.
"""

__version__ = "0.1"
