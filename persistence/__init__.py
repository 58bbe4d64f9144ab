"""ottermq.persistence."""
