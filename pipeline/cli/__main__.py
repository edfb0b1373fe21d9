"""``python -m pipeline.cli``: ``ground`` (the worker supervisor starts its children so)."""

import sys

from pipeline.cli import main

sys.exit(main())
