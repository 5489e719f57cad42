"""``python -m bnsym.cli``: the ``bnsym`` command."""

import sys

from .command import main

sys.exit(main())
