"""`python -m evprobe.experiments ...` is `evprobe ...`, like `python -m evprobe`."""

import sys

from evprobe.experiments.cli import main

sys.exit(main())
