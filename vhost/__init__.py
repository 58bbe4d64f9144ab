"""ottermq.vhost."""
