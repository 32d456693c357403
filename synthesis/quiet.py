"""Keep datatrove's console logging out of convrag's output: its log lines go to the task log files only.

datatrove resets loguru's sinks at the start of every task (console at INFO plus a file under
``logging_dir/logs``). ``silence_datatrove`` wraps that set-up in the current process so that only the file
sink stays; convrag reports progress, counts and errors itself (an error ends in one line, not a logged
traceback). Call it in every process that runs tasks (the local executor's workers call it per task).
"""

from __future__ import annotations

from typing import Any

from loguru import logger

_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"


def _file_only(original: Any) -> Any:
    def add_task_logger(logging_dir: Any, rank: int, local_rank: int = 0, node_rank: int = -1) -> Any:
        logfile = original(logging_dir, rank, local_rank, node_rank=node_rank)
        logger.remove()
        logger.add(logfile, level="DEBUG", format=_FORMAT, colorize=False)
        return logfile

    add_task_logger.convrag_quiet = True  # type: ignore[attr-defined]
    return add_task_logger


def _close(logfile: Any) -> None:
    """datatrove's task log closing, without putting the console sink back."""
    logger.complete()
    logger.remove()
    logfile.close()


def silence_datatrove() -> None:
    """Remove loguru's console sink now and after every datatrove task set-up or tear-down in this process."""
    import datatrove.executor.base as base

    logger.remove()
    if not getattr(base.add_task_logger, "convrag_quiet", False):
        base.add_task_logger = _file_only(base.add_task_logger)
        base.close_task_logger = _close
