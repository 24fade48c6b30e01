"""`python -m nmtdecode` (also what `torchrun -m nmtdecode` runs)."""

from .cli import main

if __name__ == "__main__":
    main()
