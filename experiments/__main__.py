"""`python -m experiments ...` is `evprobe ...` (so `torchrun -m experiments run ...` works)."""

import sys

from experiments.cli import main

sys.exit(main())
