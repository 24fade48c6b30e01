"""`python -m nmtdecode` (also what `torchrun -m nmtdecode` runs)."""

from .jobs import signals

signals.install()  # before the imports below: a signal during them ends the program cleanly too

from .cli import main  # noqa: E402

if __name__ == "__main__":
    main()
