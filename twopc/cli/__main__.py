"""`python -m twopc.cli`: the same as the `twopc` command."""

import sys

from twopc.cli import main

sys.exit(main())
