"""``python -m tttembed``: the command line (how ``serve --learn`` starts its learner)."""

from tttembed.cli import main

main()
