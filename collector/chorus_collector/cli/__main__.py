"""``python -m chorus_collector.cli``: the ``chorus`` command."""

import sys

from chorus_collector.cli import main

sys.exit(main())
