"""``python -m tunesmith`` runs the command line."""

import sys

from tunesmith.cli import main

sys.exit(main())
