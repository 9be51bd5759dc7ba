"""The parts of an answer: interference at the co-runners' overlaps, queue wait, transfers, filled-in signals, and a ranking's rows."""
