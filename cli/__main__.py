"""`python -m rl2edge.cli ARGS`: the console script, where none is on PATH (a rank of `train --nproc`,
the Mender update module's script)."""

import sys

from rl2edge.cli.entry import main

sys.exit(main())
