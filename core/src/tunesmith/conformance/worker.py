"""``python -m tunesmith.conformance.worker BACKEND DEVICE FOLDER``: check cases, one JSON line each.

Loads only BACKEND and the aten reference, reads ``FOLDER/cases.json`` and
``FOLDER/quarantine.json``, and appends to ``FOLDER/out.jsonl``: ``{"start": id}``, then
``{"choice": spec}`` before each choice runs, then ``{"result": {...}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def main(argv: list[str]) -> int:
    backend, device, folder = argv[0], torch.device(argv[1]), Path(argv[2])
    from tunesmith.conformance.cases import Case
    from tunesmith.conformance.checks import check_case, poison_uninitialized_memory
    from tunesmith.conformance.target import load_only
    from tunesmith.plugins import describe_error

    load_only(backend)
    poison_uninitialized_memory()
    cases = [Case(**raw) for raw in json.loads((folder / "cases.json").read_text())]
    quarantine = set(json.loads((folder / "quarantine.json").read_text()))
    with (folder / "out.jsonl").open("a") as out:

        def emit(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        for case in cases:
            emit({"start": case.id})
            try:
                result = check_case(backend, case, device, lambda spec: emit({"choice": spec}), quarantine)
            except Exception as exc:  # noqa: BLE001 - reported as this case's failure
                result = {"id": case.id, "error": f"the check itself failed: {describe_error(exc)}"}
            emit({"result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
