"""``python -m maple_async.cli``: the ``maple-async`` console script."""

import sys

from .commands import main

sys.exit(main())
