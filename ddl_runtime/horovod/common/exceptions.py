"""Horovod's exception types (horovod.common.exceptions)."""
from ...errors import DDLError, DDLInputError


class HorovodInternalError(DDLError):
    """A collective failed inside the runtime (Horovod's elastic mode restores state on it)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod elastic: the set of hosts changed.  Never raised here: no elastic driver, the ranks are fixed (see common/elastic.py)."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class NotSupportedError(DDLInputError, NotImplementedError):
    """What Horovod refuses with NotImplementedError (Adasum over a process set or a non-power-of-two
    number of ranks): still one of ddl_runtime's one-line input errors."""
