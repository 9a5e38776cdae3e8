"""``python -m profdsl``: the command line."""

from profdsl.cli import main

raise SystemExit(main())
