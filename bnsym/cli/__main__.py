"""``python -m bnsym.cli``: the ``bnsym`` command."""

import sys

from .command import main

if __name__ == "__main__":  # importing the module (a walk over the package) runs nothing
    sys.exit(main())
