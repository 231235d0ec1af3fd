"""sync layer of crossspec."""
