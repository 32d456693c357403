"""Keep datatrove's console logging out of convrag's output: its log lines go to the task log files only.

datatrove resets loguru's sinks at the start of every task (console at INFO plus a file under
``logging_dir/logs``) and puts the console back at its end. ``silence_datatrove`` replaces both in the current
process so that only the file sink exists; convrag reports progress, counts and errors itself (an error
ends in one line, not a logged traceback). Call it in every process that runs tasks (the local executor's
workers and the Ray executor's tasks call it per task).
"""

from __future__ import annotations

from typing import Any

from loguru import logger

_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}"


def _add_task_logger(logging_dir: Any, rank: int, local_rank: int = 0, node_rank: int = -1) -> Any:
    """datatrove's task log set-up (``logs/task_NNNNN.log`` under the logging folder) without a console sink."""
    logger.remove()
    logfile = logging_dir.open(f"logs/task_{rank:05d}.log", "w")
    logger.add(logfile, level="DEBUG", format=_FORMAT, colorize=False)
    logger.info(f"Launching pipeline for {rank=}")
    return logfile


def _close(logfile: Any) -> None:
    """datatrove's task log closing, without putting the console sink back."""
    logger.complete()
    logger.remove()
    logfile.close()


def silence_datatrove() -> None:
    """Remove loguru's console sink now and after every datatrove task set-up or tear-down in this process."""
    import datatrove.executor.base as base
    import datatrove.executor.ray as ray  # its tasks set up their logging with names of their own

    logger.remove()
    for module in (base, ray):
        module.add_task_logger = _add_task_logger
        module.close_task_logger = _close
