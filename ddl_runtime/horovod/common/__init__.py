"""What every framework layer shares: basics, process sets, exceptions, the handle table."""
from .basics import *  # noqa: F401,F403
from .basics import __all__ as _basics_all
from .exceptions import HorovodInternalError, HostsUpdatedInterrupt
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

__all__ = list(_basics_all) + ["HorovodInternalError", "HostsUpdatedInterrupt", "ProcessSet",
                               "add_process_set", "global_process_set", "remove_process_set"]
