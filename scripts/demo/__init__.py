"""The demo model recipe, one module per stage; `scripts/train_demo.py` runs them in order."""
