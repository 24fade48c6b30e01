"""`python -m nmtdecode` (also what `torchrun -m nmtdecode` runs)."""

from .cli import main

main()
