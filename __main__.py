"""`python -m numasched`."""

import sys

from numasched.cli import main

sys.exit(main())
