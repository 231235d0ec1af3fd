"""bench layer of crossspec."""
