"""ottermq.broker."""

VERSION = "0.1.0"  # as pyproject.toml's version; the server reports it in connection.start
