"""``python -m paper_figures``: draw every figure whose inputs exist (see `paper_figures.all`)."""

import sys

from paper_figures.all import main

sys.exit(main())
