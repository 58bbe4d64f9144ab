"""ottermq.broker."""
