"""``python -m tunesmith`` runs the command line."""

import sys

try:
    from tunesmith.cli import main
except KeyboardInterrupt:  # Ctrl-C in the milliseconds before the command handles it itself
    sys.stderr.write("interrupted\n")
    sys.exit(130)

sys.exit(main())
