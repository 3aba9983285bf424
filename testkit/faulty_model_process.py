"""The model process of runtime.model_process with a fault injected: the real child, whose interpreter
kills its own process with a real signal on every FAULT_EVERY-th run (0: on the start-up run) (SIGSEGV by default, FAULT_SIGNAL
names another; ABRT for os.abort()), or hangs (FAULT_SIGNAL=HANG). For the tests of a model that crashes
inside serve's model process; its faults are the kernel's, not simulated exceptions.

    python -m testkit.faulty_model_process MODEL --backend B --threads N --fds R W
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from rl2edge.runtime import interpreters, model_process

EVERY = int(os.environ.get("FAULT_EVERY", "50"))
KIND = os.environ.get("FAULT_SIGNAL", "SEGV")


class _Faulty:
    def __init__(self, inner: Any):
        self._inner, self._runs = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _maybe_fault(self) -> None:
        self._runs += 1
        # the first run is the start-up check; FAULT_EVERY=0 faults there (a model that cannot load)
        if EVERY == 0 or (self._runs > 1 and self._runs % EVERY == 0):
            if KIND == "HANG":
                time.sleep(3600)
            elif KIND == "ABRT":
                os.abort()
            os.kill(os.getpid(), getattr(signal, f"SIG{KIND}"))

    def run(self, x: Any) -> Any:
        self._maybe_fault()
        return self._inner.run(x)

    def run_with(self, x: Any, feeds: Any) -> Any:
        self._maybe_fault()
        return self._inner.run_with(x, feeds)


_open = interpreters.open_backend
interpreters.open_backend = lambda *a, **k: _Faulty(_open(*a, **k))  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(model_process.main())
