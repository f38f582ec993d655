"""``python -m rpc_harness ...``: the ``rpc-harness`` command."""

import sys

from .apps.cli import main

sys.exit(main())
