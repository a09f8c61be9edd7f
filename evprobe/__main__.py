"""`python -m evprobe ...` is `evprobe ...` (so `torchrun -m evprobe run ...` works)."""

import sys

from evprobe.experiments.cli import main

sys.exit(main())
