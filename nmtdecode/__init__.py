"""nmtdecode: a decoder for encoder-decoder translation and summarization checkpoints."""

__version__ = "0.1.0"
