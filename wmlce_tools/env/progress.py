"""A rich progress display fed by rattler's installer callbacks."""
from __future__ import annotations

from typing import Any


class RichInstallReporter:
    """Implements rattler's ``InstallerReporter`` protocol (structurally) on a rich Progress."""

    def __init__(self, progress: Any, label: str) -> None:
        self.progress = progress
        self.label = label
        self.task = progress.add_task(label, total=None)
        self.names: dict[int, str] = {}
        self._next = 0

    # --- rattler callbacks (all optional in the protocol)
    def on_transaction_start(self, total_operations: int) -> None:
        self.progress.update(self.task, total=total_operations, completed=0)

    def on_transaction_operation_start(self, operation: int) -> None:
        pass

    def on_populate_cache_start(self, operation: int, package_name: str) -> int:
        self.progress.update(self.task, description=f"{self.label}: fetching {package_name}")
        return operation

    def on_populate_cache_complete(self, cache_entry: int) -> None:
        pass

    def on_validate_start(self, cache_entry: int) -> int:
        return cache_entry

    def on_validate_complete(self, validate_idx: int) -> None:
        pass

    def on_download_start(self, cache_entry: int) -> int:
        return cache_entry

    def on_download_progress(self, download_idx: int, progress: int, total: int | None) -> None:
        pass

    def on_download_completed(self, download_idx: int) -> None:
        pass

    def on_unlink_start(self, operation: int, package_name: str) -> int:
        return operation

    def on_unlink_complete(self, index: int) -> None:
        pass

    def on_link_start(self, operation: int, package_name: str) -> int:
        self.progress.update(self.task, description=f"{self.label}: linking {package_name}")
        return operation

    def on_link_complete(self, index: int) -> None:
        pass

    def on_transaction_operation_complete(self, operation: int) -> None:
        self.progress.advance(self.task)

    def on_transaction_complete(self) -> None:
        self.progress.update(self.task, description=f"{self.label}: done")

    def on_post_link_start(self, package_name: str, script_path: str) -> int:
        return 0

    def on_post_link_complete(self, index: int, success: bool) -> None:
        pass

    def on_pre_unlink_start(self, package_name: str, script_path: str) -> int:
        return 0

    def on_pre_unlink_complete(self, index: int, success: bool) -> None:
        pass


def make_progress(enabled: bool) -> Any:
    """A rich Progress on stderr (transient), or a do-nothing stand-in when disabled."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True,
                    disable=not enabled)
