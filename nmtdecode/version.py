"""The version of nmtdecode (pyproject.toml says the same; a test checks it)."""

__version__ = "0.1.0"
