"""Collecting what was captured: writing traces into ``save_path`` (export), relocating what other
tools wrote there (nsys reports, engine traces), the manifest, and the finish hook's command.
Everything here is best effort and never raises into training."""
