"""One item of a definitions file, read field by field; an error names the item
(``queues[2] (queue 'q' in vhost '/'): 'durable' must be a boolean``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .arguments import DefinitionsError


class Entry:
    """One item of a section, with a label for error messages."""

    def __init__(self, section: str, index: int, item: Any) -> None:
        if not isinstance(item, dict):
            raise DefinitionsError(f"{section}[{index}]: must be an object, got {item!r}")
        self.item: dict[str, Any] = item
        self.section = section
        self.where = f"{section}[{index}]"

    def label(self, text: str) -> None:
        self.where = f"{self.where} ({text})"

    def fail(self, problem: str) -> DefinitionsError:
        return DefinitionsError(f"{self.where}: {problem}")

    def string(self, key: str, default: str | None = None, *, non_empty: bool = False) -> str:
        value = self.item.get(key, default)
        if value is None:
            raise self.fail(f"missing '{key}'")
        if not isinstance(value, str):
            raise self.fail(f"'{key}' must be a string, got {value!r}")
        if non_empty and not value:
            raise self.fail(f"'{key}' must not be empty")
        return self.text(key, value)

    def text(self, key: str, value: str) -> str:
        """``value`` if it can be stored: Unicode text, not a lone surrogate escape such as ``"\\ud800"``
        (which JSON allows and no name, key or password is encoded from)."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(f"'{key}' is not valid Unicode (a lone surrogate)") from None
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.item.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"'{key}' must be a boolean, got {value!r}")
        return value

    def tags(self, value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [self.text("tags", tag.strip()) for tag in value.split(",") if tag.strip()]
        if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
            return [self.text("tags", tag.strip()) for tag in value if tag.strip()]
        raise self.fail(f"'tags' must be a list of strings or a comma-separated string, got {value!r}")


def section(data: Mapping[str, Any], key: str) -> list[Any]:
    """The list under ``key`` (empty when absent or null).

    Raises:
        DefinitionsError: not a list.
    """
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DefinitionsError(f"'{key}' must be a list, got {type(value).__name__}")
    return value


def entries(data: Mapping[str, Any], key: str) -> list[Entry]:
    """Every item of the section ``key``, each an ``Entry``.

    Raises:
        DefinitionsError: the section is not a list, or an item is not an object.
    """
    return [Entry(key, i, item) for i, item in enumerate(section(data, key))]
