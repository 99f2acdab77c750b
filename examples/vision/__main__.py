"""``python -m examples.vision [flags]``: train an image classifier (see ``--help``)."""

import sys

from examples.vision.train import cli

sys.exit(cli())
