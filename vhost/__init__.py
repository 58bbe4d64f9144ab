"""ottermq.vhost."""

from ottermq.amqp import native

native.install()  # compiled modules or their sources, before the first of them is imported
