"""`python -m twopc.cli`: the same as the `twopc` command.

Design: docs/design.md section 7.
"""

import sys

from twopc.cli import main

sys.exit(main())
