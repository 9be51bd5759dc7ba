"""What a query knows: its *shape*, the key its answers are calibrated under.

The same batch is predicted better when the question carries more (co-runners with their
overlaps, device signals), so each answer is calibrated on the residuals of answers *of its own
shape* (:mod:`predictor.calibration.shape`): one calibration for all would make the bounds of
poorly informed questions too narrow and those of well informed ones too wide. A shape is a
function of the raw query as received, defined here only:

* ``runners`` — how the co-runners are known: ``none`` (the device is idle), ``overlap`` (every
  co-runner with its overlap), ``remaining`` (some by remaining time, the rest by overlap),
  ``unknown`` (some with neither: the overlap is estimated) or ``live`` (from the live view);
* ``signals`` — whether the query gave device signals.

The number of co-runners is a separate key (:func:`count_bucket`), capped at
:data:`MAX_COUNT` (``3`` stands for three or more).

Examples
--------
>>> QueryShape.of(0, 0, 0, signals=False).key
'none/nosig'
>>> QueryShape.of(2, overlaps=2, remaining=0, signals=True).key
'overlap/sig'
>>> QueryShape.of(2, overlaps=1, remaining=0, signals=False).key
'unknown/nosig'
>>> [s.key for s in QueryShape.parse("live/sig").chain()]
['live/sig', 'unknown/sig', 'live/nosig', 'unknown/nosig']
>>> count_bucket(0), count_bucket(2), count_bucket(7)
(0, 2, 3)
"""

from __future__ import annotations

from dataclasses import dataclass

RUNNERS = ("none", "overlap", "remaining", "unknown", "live")
MAX_COUNT = 3
ADMISSION = "unknown/nosig"
"""The shape of the admission-time question the service replays for every observation:
co-runners without overlaps, no signals (what a scheduler knows before dispatch)."""


@dataclass(frozen=True, slots=True)
class QueryShape:
    """How much a query knows (see the module documentation)."""

    runners: str
    signals: bool

    def __post_init__(self) -> None:
        if self.runners not in RUNNERS:
            raise ValueError(f"runners must be one of {', '.join(RUNNERS)}, got {self.runners!r}")

    @classmethod
    def of(cls, co_runners: int, overlaps: int, remaining: int, *, signals: bool, live: bool = False) -> QueryShape:
        """The shape of a query with ``co_runners`` co-runners, of which ``overlaps`` came with an
        overlap and ``remaining`` with a remaining time; ``live``: they come from the live view."""
        if co_runners == 0:
            runners = "none"
        elif live:
            runners = "live"
        elif overlaps + remaining < co_runners:
            runners = "unknown"
        elif remaining:
            runners = "remaining"
        else:
            runners = "overlap"
        return cls(runners, bool(signals))

    @classmethod
    def parse(cls, key: str) -> QueryShape:
        """The shape of a key ``runners/sig`` or ``runners/nosig``."""
        runners, _, sig = key.partition("/")
        if sig not in ("sig", "nosig"):
            raise ValueError(f"not a query shape: {key!r}")
        return cls(runners, sig == "sig")

    @property
    def key(self) -> str:
        """``runners/sig`` or ``runners/nosig``."""
        return f"{self.runners}/{'sig' if self.signals else 'nosig'}"

    @property
    def idle(self) -> QueryShape:
        """The shape of the same query without co-runners."""
        return QueryShape("none", self.signals)

    def nested(self) -> list[QueryShape]:
        """The shapes a query with some of this query's co-runners can have (co-runners of each
        kind of knowledge it may hold), itself last: what a bound monotone in crowding must not
        fall below. ``unknown`` may hold co-runners of every explicit kind, ``remaining`` ones
        given by overlap too; the signals flag is kept.

        >>> [s.key for s in QueryShape.parse("unknown/nosig").nested()]
        ['overlap/nosig', 'remaining/nosig', 'unknown/nosig']
        """
        below = {"remaining": ("overlap",), "unknown": ("overlap", "remaining")}.get(self.runners, ())
        return [QueryShape(r, self.signals) for r in below] + [self]

    def chain(self) -> list[QueryShape]:
        """This shape, then the shapes whose residuals stand in for it when it has too few,
        nearest first: co-runners of uncertain overlap (``remaining``, ``live``) are answered like
        ``unknown`` ones, and a query with signals like one without."""
        runner_chain = [self.runners]
        if self.runners in ("remaining", "live"):
            runner_chain.append("unknown")
        sig_chain = [self.signals] + ([False] if self.signals else [])
        return [QueryShape(r, s) for s in sig_chain for r in runner_chain]


def count_bucket(co_runners: int) -> int:
    """The co-runner count key: the count, capped at :data:`MAX_COUNT`."""
    return min(int(co_runners), MAX_COUNT)


def count_label(bucket: int) -> str:
    """``"0"``, ``"1"``, ``"2"`` or ``"3+"``."""
    return f"{bucket}+" if bucket >= MAX_COUNT else str(bucket)
