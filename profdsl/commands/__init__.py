"""The `profdsl` subcommands: one module each, imported only when its command runs."""
