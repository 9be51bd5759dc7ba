"""``python -m predictor.cli``: the ``predictor`` command line."""

import sys

from predictor.cli.main import main

sys.exit(main())
