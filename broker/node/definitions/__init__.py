"""RabbitMQ definitions (``rabbitmqctl export_definitions`` JSON): ``json_format`` reads and
validates a file into ``Definitions`` (``entry`` one item, ``components`` policies, limits and
runtime parameters, ``arguments`` argument tables), ``export`` writes ``Definitions`` back as
RabbitMQ's JSON (pure, no I/O but reading a file); ``apply`` is the one applier every way in uses
(start-up, HTTP, command line, and start-up recovery restoring the store's records); ``report``
says what an import applied and what it skipped, and why."""

from __future__ import annotations

from .apply import Restore, apply_definitions, check_references
from .arguments import DefinitionsError, arguments_from_json, arguments_to_json
from .export import definitions_to_json
from .json_format import DefinitionsFile, definitions_from_json, load_definitions_file
from .report import ImportReport, Skipped

__all__ = [
    "DefinitionsError",
    "DefinitionsFile",
    "ImportReport",
    "Restore",
    "Skipped",
    "apply_definitions",
    "arguments_from_json",
    "arguments_to_json",
    "check_references",
    "definitions_from_json",
    "definitions_to_json",
    "load_definitions_file",
]
