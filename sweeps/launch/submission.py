"""Whether a launcher can submit from here, and what a failed submission says.

`check_submission` runs before the run dir is made (the launcher's own check; SLURM:
``sbatch --test-only``, so a controller that does not answer leaves nothing behind); `submission_errors` turns an
``sbatch`` that refuses a trial's job later into `SubmissionFailed`: exit 1 with one
paragraph naming the command, its exit code and what it said, the trials left queued."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import submitit

from stepscale.errors import EnvironmentFailure


class SubmissionFailed(EnvironmentFailure):
    """The launcher's submission command (``sbatch``) failed: exit 1 with its command,
    exit code and stderr; the trials it was to run stay queued for the next run."""


def submission_message(command: Any, code: int | str, stderr: str) -> str:
    """One paragraph naming the command that failed, its exit code and what it said."""
    words = command if isinstance(command, list | tuple) else [command]
    said = "; ".join(line.strip() for line in (stderr or "").splitlines() if line.strip())
    return (
        f"the launcher could not submit the trial job: `{' '.join(map(str, words))}` exited "
        f"with code {code}{f': {said}' if said else ' and said nothing'}. The trials it was to "
        "run stay queued (state queued in their trial.json): run the same `sweep run` again "
        "once the cluster takes jobs"
    )


@contextlib.contextmanager
def submission_errors() -> Iterator[None]:
    """Turn a failed submission command into `SubmissionFailed` (submitit would raise its
    own error and print the command's stderr a second time)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    except submitit.core.utils.FailedJobError as exc:
        cause = exc.__cause__
        if isinstance(cause, subprocess.CalledProcessError):
            stderr = cause.stderr if isinstance(cause.stderr, str) else str(exc)
            raise SubmissionFailed(
                submission_message(cause.cmd, cause.returncode, stderr)
            ) from None
        raise SubmissionFailed(submission_message("sbatch", "unknown", str(exc))) from None
    except FileNotFoundError as exc:
        if exc.filename not in ("sbatch", "srun", "scontrol"):
            raise
        raise SubmissionFailed(
            submission_message(exc.filename, "none", f"not found ({exc.strerror})")
        ) from None
    except BaseException:
        sys.stderr.write(captured.getvalue())
        raise
    # What other threads said meanwhile (a failure's own output is in its message).
    sys.stderr.write(captured.getvalue())
