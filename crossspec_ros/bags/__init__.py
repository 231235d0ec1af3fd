"""bags layer of crossspec."""
