"""models layer of crossspec."""
