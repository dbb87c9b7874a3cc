"""`python -m lab.simulate OUT --runs N --seed S`."""

import sys

from .cli import main

sys.exit(main())
