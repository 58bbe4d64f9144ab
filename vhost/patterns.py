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
5. A pattern only ``regex`` reads remembers its answer per name, running out of time included: a
   name costs its ``TIMEOUT`` once, not at every re-application of the policies. The answers of all
   patterns share one memory of ``KNOWN_MAX`` entries, emptied whole when full (so many patterns
   times many names cannot grow it without bound; a name forgotten is matched again).
6. One name matched against every policy on the event loop (a queue or exchange being declared)
   gets ``NAME_BUDGET`` (50 ms) for all the patterns together (:func:`name_budget`): a pattern
   reached after that counts as out of time for this declare (not remembered, logged), so a
   policymaker's many costly patterns cannot make one declare hold the loop for their sum.
7. Matching one pattern against many names (a policy set while 500 queues exist: 500 x 20 ms)
   is done by :meth:`Pattern.prepare`, in a worker thread (``regex`` releases the GIL while it
   matches), within ``BUDGET`` seconds in all: the names it does not reach in time count as running
   out of time (rule 2: no match, logged once). The event loop then finds every answer remembered.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterable, Iterator

import re2
import regex

log = logging.getLogger(__name__)

__all__ = [
    "BUDGET",
    "NAME_BUDGET",
    "TIMEOUT",
    "Pattern",
    "PatternError",
    "PatternTimeout",
    "compile_pattern",
    "name_budget",
]

TIMEOUT = 0.02
"""Seconds a pattern only ``regex`` reads may spend on one name (rule 2)."""

BUDGET = 2.0
"""Seconds :meth:`Pattern.prepare` may spend on all the names of one request (rule 7)."""

NAME_BUDGET = 0.05
"""Seconds one declared name may spend on all the policies' patterns on the event loop (rule 6)."""

KNOWN_MAX = 200_000
"""(pattern, name) answers remembered, all patterns together (rule 5)."""

# remembered answers (rule 5): (source, ignore_case, name) -> _NO, _YES or _OUT_OF_TIME
_NO, _YES, _OUT_OF_TIME = 0, 1, 2
_KNOWN: dict[tuple[str, bool, str], int] = {}
_name_deadline = 0.0  # time.monotonic() deadline of the name being declared (rule 6); 0: none


@contextlib.contextmanager
def name_budget(seconds: float | None = None) -> Iterator[None]:
    """Within this block (on the event loop), patterns matched on names not remembered share
    ``seconds`` (``NAME_BUDGET``) in all (rule 6)."""
    global _name_deadline
    outer = _name_deadline
    _name_deadline = time.monotonic() + (NAME_BUDGET if seconds is None else seconds)
    try:
        yield
    finally:
        _name_deadline = outer


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

    __slots__ = ("source", "bounded", "_re2", "_regex", "_case")

    def __init__(self, source: str, ignore_case: bool = False) -> None:
        self.source = source
        self._re2: re2._Regexp | None = None
        self._regex: regex.Pattern[str] | None = None
        self._case = ignore_case
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
            PatternTimeout: a PCRE-only pattern ran out of time (rule 2), now or before (rule 5).
        """
        if self._re2 is not None:
            return self._re2.search(text) is not None
        known = _KNOWN.get((self.source, self._case, text))
        if known is None:
            known = self._match(text)
        if known == _OUT_OF_TIME:
            raise PatternTimeout(f"regular expression '{self.source}' is too expensive to evaluate")
        return known == _YES

    def _match(self, text: str) -> int:
        """Match with ``regex`` in at most ``TIMEOUT`` seconds (the GIL released meanwhile), or what
        is left of the declare's ``name_budget``, and remember the answer if it had its full time
        (running out of time is logged)."""
        assert self._regex is not None
        timeout = TIMEOUT
        if _name_deadline:
            timeout = min(TIMEOUT, _name_deadline - time.monotonic())
            if timeout <= 0:
                log.warning(
                    "regular expression %r not tried: the name's %.0f ms are spent",
                    self.source,
                    NAME_BUDGET * 1000,
                )
                return _OUT_OF_TIME
        try:
            found = _YES if self._regex.search(text, timeout=timeout, concurrent=True) is not None else _NO
        except TimeoutError:
            log.warning(
                "regular expression %r ran out of time (%.0f ms) on a name of %d characters",
                self.source,
                timeout * 1000,
                len(text),
            )
            if timeout < TIMEOUT:
                return _OUT_OF_TIME  # cut short by the name's budget: not its own answer
            found = _OUT_OF_TIME
        self._remember(text, found)
        return found

    def _remember(self, text: str, found: int) -> None:
        if len(_KNOWN) >= KNOWN_MAX:
            _KNOWN.clear()
        _KNOWN[(self.source, self._case, text)] = found

    def prepare(self, names: Iterable[str], budget: float = BUDGET) -> int:
        """Match every name not yet remembered, within ``budget`` seconds in all (rule 7); run it in
        a worker thread. A pattern RE2 reads needs none of this.

        Returns:
            How many names were left unmatched when the budget ran out (they count as out of time).
        """
        if self._regex is None:
            return 0
        deadline = time.monotonic() + budget
        skipped = slow = 0
        for name in names:
            if (self.source, self._case, name) in _KNOWN:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                self._remember(name, _OUT_OF_TIME)
                skipped += 1
                continue
            try:
                hit = self._regex.search(name, timeout=min(TIMEOUT, left), concurrent=True) is not None
                found = _YES if hit else _NO
            except TimeoutError:
                found = _OUT_OF_TIME
                slow += 1
            self._remember(name, found)
        if slow or skipped:
            log.warning(
                "regular expression %r ran out of time on %d names (%.0f ms each) and was not tried on %d"
                " more (%.1f s in all): it does not apply to them",
                self.source,
                slow,
                TIMEOUT * 1000,
                skipped,
                budget,
            )
        return skipped

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
