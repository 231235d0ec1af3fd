"""speculative layer of crossspec."""
