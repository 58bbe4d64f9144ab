"""ottermq.dlx."""
