"""``python -m profdsl``: the command line."""

from profdsl._cli import main

raise SystemExit(main())
