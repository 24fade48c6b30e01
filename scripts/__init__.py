"""Reproducible build steps for data/ (run from a checkout; not installed with nmtdecode)."""
