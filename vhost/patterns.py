"""User-supplied regular expressions with a bound on their cost: policy and operator-policy
patterns, permission and topic-permission regexes, the API's ``use_regex`` list filters.

Rules:

1. A pattern RE2 reads runs on RE2 (``google-re2``): matching is linear in the name's length, so no
   pattern (``(a+)+$`` included) can stall the event loop, whatever the name.
2. RabbitMQ's patterns are PCRE. The PCRE features RE2 refuses (look-around, back-references,
   possessive quantifiers, atomic groups) are read by ``regex`` (a PCRE-like engine) and matched
   with a time bound (``TIMEOUT``): a match that runs out of time raises :class:`PatternTimeout`,
   which each caller answers on the safe side (a list filter: 400; a policy: does not apply; a
   permission: refused), logged.
3. A pattern neither engine reads raises :class:`PatternError` with the engine's reason.
4. Compiled patterns are cached by (source, case) in a bounded cache; compiling is not on any
   per-message path.
"""

from __future__ import annotations

import functools
import logging

import re2
import regex

log = logging.getLogger(__name__)

__all__ = ["TIMEOUT", "Pattern", "PatternError", "PatternTimeout", "compile_pattern"]

TIMEOUT = 0.02
"""Seconds a pattern only ``regex`` reads may spend on one name (rule 2)."""


class PatternError(ValueError):
    """A pattern neither engine reads; ``str(error)`` is the reason."""


class PatternTimeout(PatternError):
    """A PCRE-only pattern ran out of time on one name (rule 2)."""


def _re2_options(ignore_case: bool) -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern goes to the fallback, not to stderr
    options.case_sensitive = not ignore_case
    return options


class Pattern:
    """One compiled pattern (see the module rules); use :func:`compile_pattern`.

    Raises:
        PatternError: neither engine reads ``source``.
    """

    __slots__ = ("source", "bounded", "_re2", "_regex")

    def __init__(self, source: str, ignore_case: bool = False) -> None:
        self.source = source
        self._re2: re2._Regexp | None = None
        self._regex: regex.Pattern[str] | None = None
        try:
            self._re2 = re2.compile(source, _re2_options(ignore_case))
        except re2.error:
            try:
                self._regex = regex.compile(source, regex.IGNORECASE if ignore_case else 0)
            except regex.error as exc:
                raise PatternError(str(exc)) from None
            except (OverflowError, RecursionError, MemoryError) as exc:
                raise PatternError(f"pattern too complex: {type(exc).__name__}") from None
        self.bounded = self._re2 is not None  # linear time, no timeout needed

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text``.

        Raises:
            PatternTimeout: a PCRE-only pattern ran out of time (rule 2).
        """
        if self._re2 is not None:
            return self._re2.search(text) is not None
        assert self._regex is not None
        try:
            return self._regex.search(text, timeout=TIMEOUT) is not None
        except TimeoutError:
            log.warning(
                "regular expression %r ran out of time (%.0f ms) on a name of %d characters",
                self.source,
                TIMEOUT * 1000,
                len(text),
            )
            raise PatternTimeout(f"regular expression '{self.source}' is too expensive to evaluate") from None

    def matches(self, text: str) -> bool:
        """:meth:`search` where running out of time counts as no match (logged)."""
        try:
            return self.search(text)
        except PatternTimeout:
            return False

    def __repr__(self) -> str:
        return f"Pattern({self.source!r})"


@functools.lru_cache(maxsize=4096)
def compile_pattern(source: str, ignore_case: bool = False) -> Pattern:
    """A cached :class:`Pattern`.

    Raises:
        PatternError: neither engine reads ``source``.
    """
    return Pattern(source, ignore_case)
