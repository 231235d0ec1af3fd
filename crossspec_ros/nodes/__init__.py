"""nodes layer of crossspec."""
