"""Status codes the service writes to the PLC's status node every cycle (and counts)."""

from enum import IntEnum


class CycleStatus(IntEnum):
    """Statuses 1-4 write the node map's fault response (plc_bridge.fault_response: the safe action, or the
    last action held, status + 16, or a ramp to the safe action, status + 32); 5-7 the safe action."""

    OK = 0
    INVALID_OBSERVATION = 1  # NaN/Inf, wrong length, or outside its declared range
    STALE = 2  # the PLC's sequence number has not moved for longer than the stale limit
    DEADLINE_MISS = 3  # the cycle ran past its deadline
    INFERENCE_ERROR = 4  # the interpreter failed
    SHUTDOWN = 5  # the service is stopping: safe action written
    STARTUP = 6  # first cycle after (re)connecting, before a fresh observation: safe action written
    WRITE_REJECTED = 7  # the PLC refused a written value: safe action written where it can be, no answer
