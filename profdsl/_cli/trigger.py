"""``profdsl trigger SAVE_PATH --steps N``: ask a running job to trace its next N steps."""

from __future__ import annotations

import argparse
import os
import re
import time

from profdsl._cli.common import fail, fail_pointing, printable, say
from profdsl.collect._manifest import MANIFEST_NAME
from profdsl.collect._requests import REQUESTS_DIR, new_id, write_request
from profdsl.config import OnDemand
from profdsl.records.fields import RecordError, to_json
from profdsl.records.requests import MAX_REQUEST_STEPS, CaptureRequest, parse_request

HELP = "ask a running job to trace its next N steps on chosen ranks and roles (no restart)"
EXAMPLES = """examples:
  profdsl trigger profiles --steps 2
  profdsl trigger profiles --steps 3 --ranks 0,8 --roles actor,rollout --reason "loss spike"
  profdsl trigger profiles --steps 1 --ranks "tp == 0 and pp == last"
  profdsl trigger profiles --steps 2 --ranks all --at-step 1200     # the same steps on every rank

Each process of the job looks for requests in SAVE_PATH/profdsl-requests/ when it begins a step
(one stat per step) and traces the steps asked on the ranks and roles asked; its finish hook runs
once the request is done. A request is taken once, only by jobs already running, within the
config's OnDemand bounds (docs/on-demand.md).
"""

_RANK_LIST = re.compile(r"\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*")
#: The most ranks ``--ranks`` may list through ranges.
MAX_LISTED = 100_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``SAVE_PATH``, ``--steps`` and what to trace."""
    parser.add_argument("save_path", help="the running job's save_path")
    parser.add_argument("--steps", type=int, required=True, help="how many steps to trace")
    parser.add_argument(
        "--ranks",
        help="'all', ranks ('0,3', '0-7,16') or a rank selector ('tp == 0'); "
        "default: the ranks the job's config traces",
    )
    parser.add_argument("--roles", help="comma-separated roles (rollout: the engines); default: every role")
    parser.add_argument(
        "--at-step", type=int, help="the first step to trace (default: the next step each process begins)"
    )
    parser.add_argument("--reason", help="why: written into the capture's records")
    parser.add_argument("--id", help="the request's id (default: trigger-TIME-RANDOM); a request id is taken once")
    parser.add_argument(
        "--create", action="store_true", help="make SAVE_PATH if it does not exist (a job that has written nothing yet)"
    )


def parse_ranks(text: str | None) -> tuple[int, ...] | str | None:
    """``--ranks``: ``all``, a list with ranges (``0-3,8``), or a selector left for the schema to
    check.

    Examples:
        >>> parse_ranks("0-2, 8"), parse_ranks("all"), parse_ranks("tp == 0")
        ((0, 1, 2, 8), 'all', 'tp == 0')
    """
    if text is None or text.strip() == "all":
        return None if text is None else "all"
    if not _RANK_LIST.fullmatch(text):
        return text
    ranks: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first or len(ranks) + last - first + 1 > MAX_LISTED:
            raise ValueError(f"--ranks: {part.strip()!r} is not a range of at most {MAX_LISTED} ranks")
        ranks.extend(range(first, last + 1))
    return tuple(ranks)


def run(args: argparse.Namespace) -> int:
    """Write the request; 0 when written, 2 for a bad argument or a folder that is not there."""
    try:
        ranks = parse_ranks(args.ranks)
        roles = tuple(r.strip() for r in args.roles.split(",")) if args.roles is not None else None
        asked = CaptureRequest(
            id=args.id or new_id("trigger"),
            steps=args.steps,
            ranks=ranks,
            roles=roles,
            at_step=args.at_step,
            reason=args.reason,
            source="file",
            created=time.time(),
        )
        request = parse_request(to_json(asked))
    except (ValueError, RecordError) as exc:
        return fail_pointing(f"trigger: {exc}")
    if not os.path.isdir(args.save_path) and (not args.create or os.path.exists(args.save_path)):
        return fail(
            f"trigger: {args.save_path}: no such folder (the job's save_path; --create makes it "
            "when the job has not written into it yet)"
        )
    try:
        path = write_request(args.save_path, request)
    except OSError as exc:
        return fail(f"trigger: cannot write into {os.path.join(args.save_path, REQUESTS_DIR)}: {exc.strerror or exc}")
    if request.ranks == "all":
        where = "every rank"
    elif request.ranks is None:
        where = "the ranks the job's config traces"
    elif isinstance(request.ranks, tuple):
        where = f"ranks {', '.join(map(str, request.ranks))}"
    else:
        where = f"the ranks where {request.ranks}"
    start = f"step {request.at_step}" if request.at_step is not None else "the next step each process begins"
    who = f"roles {', '.join(request.roles)}" if request.roles else "every role"
    steps = "step" if request.steps == 1 else "steps"
    print(
        printable(
            f"profdsl trigger: request {request.id} written to {path}: trace {request.steps} {steps} "
            f"from {start} on {where}, {who}"
        )
    )
    if not os.path.exists(os.path.join(args.save_path, MANIFEST_NAME)):
        say(
            f"note: {args.save_path} has no manifest ({MANIFEST_NAME}): no job has written into it yet; "
            "is it the job's save_path?",
            "trigger",
        )
    default = OnDemand().max_steps
    if request.steps and request.steps > default:
        print(
            f"profdsl trigger: note: the job takes at most OnDemand.max_steps steps per request ({default} by "
            f"default; {MAX_REQUEST_STEPS} at most)"
        )
    return 0
