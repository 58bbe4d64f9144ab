"""ottermq.ttl."""
