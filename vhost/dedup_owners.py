"""Which exchanges and queues of a virtual host deduplicate, with which cache: their arguments and the
policy in force decide (``dedup.dedup_settings``); a persistent cache of a durable owner is kept by the
broker's ``DedupStore``."""

from __future__ import annotations

from typing import Any, Protocol

from ottermq.amqp.errors import PreconditionFailed

from .dedup import DEDUP_EXCHANGE_TYPE, DedupCache, DedupSettings, dedup_settings
from .exchange import Exchange
from .queue import Queue


class DedupStore(Protocol):
    """Keeps persistent deduplication caches (the node's ``DedupPersistence`` when the store is durable)."""

    def attach(self, vhost: str, kind: str, name: str, cache: DedupCache) -> None:
        """Load the cache's remembered keys and write its changes from now on."""
        ...

    def detach(self, vhost: str, kind: str, name: str) -> None:
        """The owner is gone (or no longer persists its cache): forget its keys."""
        ...


def durable_owner(owner: Exchange | Queue) -> bool:
    """Whether an exchange or queue outlives a restart (an exclusive queue does not)."""
    return owner.durable and not getattr(owner, "exclusive", False)


class DedupOwners:
    """The deduplication part of one virtual host (``vhost``: its name, for texts and the store)."""

    def __init__(self, vhost: str) -> None:
        self.vhost = vhost
        self.store: DedupStore | None = None  # set by the node when the store is durable

    def settings(
        self, kind: str, owner: Exchange | Queue, definition: dict[str, Any]
    ) -> DedupSettings | None:
        """What ``owner``'s arguments and policy ``definition`` ask for (``dedup.dedup_settings``).

        Raises:
            PreconditionFailed: an invalid argument.
        """
        if isinstance(owner, Exchange):
            arguments, always = owner.arguments, owner.TYPE == DEDUP_EXCHANGE_TYPE
        else:
            arguments, always = owner.declared_args.raw, False
        durable = durable_owner(owner)
        return dedup_settings(
            arguments,
            definition,
            durable=durable,
            always=always,
            resource=f"{kind} '{owner.name}' in vhost '{self.vhost}'",
        )

    def apply_policy(self, kind: str, owner: Exchange | Queue, definition: dict[str, Any]) -> None:
        """A policy changed: the cache its arguments and the new definition ask for."""
        try:
            settings = self.settings(kind, owner, definition)
        except PreconditionFailed:
            settings = None  # a policy value the arguments already refused: keep the arguments' view
        self.configure(kind, owner, settings)

    def configure(self, kind: str, owner: Exchange | Queue, settings: DedupSettings | None) -> None:
        """Give ``owner`` the deduplication cache ``settings`` describe (None: none)."""
        cache = owner.dedup
        if settings is None:
            if cache is not None:
                owner.dedup = None
                if cache.settings.persistent and self.store is not None:
                    self.store.detach(self.vhost, kind, owner.name)
            return
        if cache is not None and cache.settings.persistent == settings.persistent:
            cache.resize(settings)
            return
        if cache is not None and cache.settings.persistent and self.store is not None:
            self.store.detach(self.vhost, kind, owner.name)
        cache = DedupCache(settings)
        owner.dedup = cache
        if settings.persistent and durable_owner(owner) and self.store is not None:
            self.store.attach(self.vhost, kind, owner.name, cache)

    def forget(self, kind: str, owner: Exchange | Queue) -> None:
        """``owner`` is deleted: its persisted keys go."""
        cache = owner.dedup
        if cache is not None and cache.settings.persistent and self.store is not None:
            self.store.detach(self.vhost, kind, owner.name)
