"""The writer and the finish hook: the one thread that writes into save_path, the jobs it runs,
and when each save_path's hook is owed (docs/architecture.md)."""
