"""Status codes the service writes to the PLC's status node every cycle (and counts)."""

from enum import IntEnum


class CycleStatus(IntEnum):
    OK = 0
    INVALID_OBSERVATION = 1  # NaN/Inf, wrong length, or outside its declared range: safe action written
    STALE = 2  # the PLC's sequence number has not moved for N cycles: safe action written
    DEADLINE_MISS = 3  # inference finished past the deadline: safe action written instead
    INFERENCE_ERROR = 4  # the interpreter failed: safe action written
    SHUTDOWN = 5  # the service is stopping: safe action written
    STARTUP = 6  # first cycle after (re)connecting, before a fresh observation: safe action written
    WRITE_REJECTED = 7  # the PLC refused a written value: safe action written where it can be, no answer
