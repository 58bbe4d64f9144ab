"""RabbitMQ definitions (``rabbitmqctl export_definitions`` JSON): ``json_format`` reads and
validates a file into ``Definitions`` and writes ``Definitions`` back as RabbitMQ's JSON (pure,
no I/O but reading a file); ``store_io`` imports ``Definitions`` into a store and exports them."""

from __future__ import annotations

from .json_format import (
    DefinitionsError,
    arguments_from_json,
    arguments_to_json,
    definitions_from_json,
    definitions_to_json,
    load_definitions_file,
)
from .store_io import export_definitions, import_definitions

__all__ = [
    "DefinitionsError",
    "arguments_from_json",
    "arguments_to_json",
    "definitions_from_json",
    "definitions_to_json",
    "export_definitions",
    "import_definitions",
    "load_definitions_file",
]
