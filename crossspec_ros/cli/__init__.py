"""cli layer of crossspec."""
