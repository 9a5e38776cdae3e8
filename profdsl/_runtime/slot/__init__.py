"""The capture slot and its sessions: the one torch (or nsys) capture a process may have open,
whom it belongs to, and which thread drives it (docs/architecture.md)."""
