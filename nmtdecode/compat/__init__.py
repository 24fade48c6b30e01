"""Other tools' Python APIs on top of nmtdecode's (api.py), so that their scripts run unchanged on
the original checkpoints: `from nmtdecode.compat import ctranslate2` (docs/ctranslate2.md)."""
