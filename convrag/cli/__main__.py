"""``python -m convrag.cli``: the ``convrag`` command."""

import sys

from convrag.cli import main

sys.exit(main())
