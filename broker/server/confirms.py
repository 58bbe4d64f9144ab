"""Publisher confirms of one channel, settled in batches the way RabbitMQ sends them.

Rules (RabbitMQ's ``rabbit_channel:send_confirms_and_nacks`` / ``coalesce_and_send``):
- A publish is settled (ack or nack) at once when it needs no disk write, or when the store commit
  holding its writes completes; until then its sequence number is *waiting*.
- Settled numbers are sent together once per event-loop turn: acks first, then nacks. A
  ``basic.return`` sends what is settled before it first, so confirms of earlier publishes never
  come after the return of a later one (the channel calls ``take`` early for that).
- A lone ack is sent with ``multiple=false``. Otherwise every ack below the *cutoff* is covered
  by one ``multiple=true`` frame for the highest of them, and the others get one ``multiple=false``
  frame each. The cutoff is the smallest number still waiting (or one past the highest ack when
  nothing waits), lowered to the smallest nack settled in the same turn. Nacks are coalesced the
  same way (even a lone one), with the acks as the barrier. A ``multiple`` frame therefore never
  covers a number whose fate is not yet known or differs.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

Frame = tuple[int, bool, bool]
"""``(delivery_tag, multiple, ack)``: one basic.ack (ack=True) or basic.nack to send."""


class Confirms:
    """Sequence numbers of one confirm-mode channel between publish and basic.ack/nack."""

    __slots__ = ("_waiting", "_acks", "_nacks")

    def __init__(self) -> None:
        self._waiting: deque[int] = deque()  # store commits complete in order: FIFO
        self._acks: list[int] = []
        self._nacks: list[int] = []

    def wait(self, seq: int) -> None:
        """``seq`` is settled later, by :meth:`settle` once its store commit completes."""
        self._waiting.append(seq)

    def settle(self, seq: int, ok: bool) -> None:
        """``seq`` is confirmed (``ok``) or refused; it goes out with the next :meth:`take`."""
        waiting = self._waiting
        if waiting and waiting[0] == seq:
            waiting.popleft()
        elif seq in waiting:
            waiting.remove(seq)
        (self._acks if ok else self._nacks).append(seq)

    @property
    def pending(self) -> int:
        """Publishes not confirmed to the client yet: awaiting their commit, or settled and unsent."""
        return len(self._waiting) + len(self._acks) + len(self._nacks)

    @property
    def settled(self) -> bool:
        """Whether anything is ready to be sent."""
        return bool(self._acks or self._nacks)

    def take(self) -> list[Frame]:
        """The frames for everything settled since the last call (acks, then nacks)."""
        acks, nacks = self._acks, self._nacks
        self._acks, self._nacks = [], []
        frames: list[Frame] = []
        if len(acks) == 1:  # RabbitMQ's send_confirms([MsgSeqNo]): a lone ack is never multiple
            frames.append((acks[0], False, True))
        elif acks:
            self._coalesce(acks, nacks, True, frames)
        if nacks:
            self._coalesce(nacks, acks, False, frames)
        return frames

    def _coalesce(self, seqs: list[int], barrier: list[int], ack: bool, frames: list[Frame]) -> None:
        seqs.sort()
        cutoff = self._waiting[0] if self._waiting else seqs[-1] + 1
        if barrier:
            cutoff = min(cutoff, min(barrier))
        below = bisect_left(seqs, cutoff)
        if below:
            frames.append((seqs[below - 1], True, ack))
        frames.extend((seq, False, ack) for seq in seqs[below:])
