"""Reading a submitted notebook as the grader grades it: its size limits, its encoding (UTF-8, with or without a
byte-order mark, or UTF-16), nbformat 3 converted, outputs removed when they alone make it too large.

Apart from notebook.py (the grading of a notebook, which needs torch) so that intake can look at a class's notebooks
and the coordinator of a run on the Dask cluster can make its jobs without importing torch."""

import json
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 20 * 2**20  # the notebook as graded: its code (outputs are not graded and are removed first)
MAX_FILE_BYTES = 256 * 2**20  # a file larger than this is not even read (outputs or not)


def read_submission(path: Path):
    """(notebook dict, raw bytes, notes) or raise ValueError with a message for the instructor and the learner.

    Only code is graded, so a notebook too large only because of its outputs is graded without them (with a note),
    and an nbformat 3 notebook is converted to version 4 (with a note)."""
    if path.is_symlink():
        raise ValueError("the notebook is a symbolic link, not a file; submit the notebook itself")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"the notebook is {size / 2**20:.0f} MiB, more than the {MAX_FILE_BYTES // 2**20} MiB a file may have "
                         "(clear the outputs and resubmit)")
    raw = path.read_bytes()
    notes = []
    try:
        text, encoding = _decode(raw)
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"the file is not a valid notebook (not JSON: {str(exc)[:120]})") from None
    if encoding != "utf-8":
        notes.append(f"the file was saved as {encoding} (a Windows editor?), not plain UTF-8: it was read as such and graded")
    if isinstance(data, dict) and data.get("nbformat") == 3 and isinstance(data.get("worksheets"), list):
        try:
            data = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
        except Exception as exc:
            raise ValueError(f"the notebook has nbformat 3 and could not be converted to version 4 ({str(exc)[:120]})") from None
        notes.append("the notebook was in nbformat 3 (an old Jupyter format): it was converted to version 4 and graded")
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError("the file is JSON but not a notebook (no list of cells)")
    if data.get("nbformat") != 4:
        raise ValueError(f"the notebook has nbformat {data.get('nbformat')!r}; only version 4 (Jupyter's current format) is accepted")
    if size > MAX_NOTEBOOK_BYTES:
        code_only = strip_outputs(data)
        code_size = len(json.dumps(code_only).encode("utf-8"))
        if code_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"the notebook's code alone is {code_size / 2**20:.0f} MiB, more than the "
                             f"{MAX_NOTEBOOK_BYTES // 2**20} MiB allowed")
        notes.append(f"the notebook was {size / 2**20:.0f} MiB with its outputs, more than the {MAX_NOTEBOOK_BYTES // 2**20} MiB "
                     "allowed: its outputs were removed (only code is graded) and it was graded")
        data = code_only
    return data, raw, notes


def _decode(raw: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8, or UTF-8 / UTF-16 with a byte-order mark, as some editors save JSON."""
    if raw.startswith(b"\xef\xbb\xbf"):
        return raw.decode("utf-8-sig"), "UTF-8 with a byte-order mark"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16"), "UTF-16"
    return raw.decode("utf-8"), "utf-8"


def strip_outputs(data: dict) -> dict:
    """The notebook without outputs, execution counts or attachments: what is graded of it."""
    out = dict(data)
    out["cells"] = []
    for cell in data.get("cells", []):
        if isinstance(cell, dict):
            cell = {k: v for k, v in cell.items() if k != "attachments"}
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
        out["cells"].append(cell)
    return out
