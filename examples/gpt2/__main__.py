"""``python -m examples.gpt2 [flags]``: train GPT-2 (see ``--help``)."""

import sys

from examples.gpt2.train import cli

sys.exit(cli())
