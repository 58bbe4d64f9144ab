"""The dead-letter archive and its reports, for the web UI's archive page (ottermq extension).

Rules:
- ``GET /api/dead-letter-archive``: the files under ``OTTERMQ_DLX_ARCHIVE_DIR`` by hour (the writer's
  ``YYYY-MM-DD/HH/`` folders, newest first), each file with its size and record count (lines; a file
  still being written ends in ``.part``). Counts are cached by (path, size, mtime), so a listing
  reads each finished file once.
- ``GET /api/dead-letter-archive/reports``: the reports under ``OTTERMQ_DLX_REPORTS_DIR``, one per
  subfolder holding the ``summary.json`` that ``ottermq dlq report --out`` writes, newest first.
- ``GET /api/dead-letter-archive/reports/{name}``: that report's summary and ``report.md`` text;
  ``.../charts/{file}`` one of its PNG charts.
- Administrators and monitoring users only (the archive holds every vhost's dead letters); a folder
  that is not configured gives ``enabled: false`` and an empty list, a missing report 404.
- Only what lies inside the configured folder is shown: a symbolic link (file or folder) whose target,
  resolved, is outside it is not followed (left out of lists, 404 when asked for); links within it are.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from .common import NotFound, broker_of, require_monitor

HOUR_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}/\d{2}$")
_counts: dict[tuple[str, int, int], int] = {}


def inside(root: Path, path: Path) -> bool:
    """Whether ``path`` exists and, symbolic links resolved, lies within ``root`` (resolved too, so the
    configured folder itself may be a link)."""
    try:
        return path.resolve(strict=True).is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError, ValueError):  # missing, a link loop, a name the file system refuses
        return False


def _count_lines(path: Path) -> int:
    lines = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            lines += chunk.count(b"\n")
    return lines


def list_archive(root: Path) -> list[dict[str, Any]]:
    """The archive's hours, newest first, with their files (blocking: run it in a thread)."""
    hours: dict[str, list[dict[str, Any]]] = {}
    for day in sorted(root.iterdir()) if root.is_dir() else []:
        for hour in sorted(day.iterdir()) if day.is_dir() and inside(root, day) else []:
            label = f"{day.name}/{hour.name}"
            if not HOUR_DIR.match(label) or not hour.is_dir() or not inside(root, hour):
                continue
            for path in sorted(hour.iterdir()):
                if ".jsonl" not in path.name or not path.is_file() or not inside(root, path):
                    continue
                st = path.stat()
                key = (str(path), st.st_size, st.st_mtime_ns)
                records = _counts.get(key)
                if records is None:
                    records = _count_lines(path)
                    if not path.name.endswith(".part"):
                        if len(_counts) > 100_000:
                            _counts.clear()
                        _counts[key] = records
                hours.setdefault(label, []).append(
                    {
                        "name": path.name,
                        "size": st.st_size,
                        "records": records,
                        "writing": path.name.endswith(".part"),
                    }
                )
    return [
        {
            "hour": label,
            "files": files,
            "size": sum(f["size"] for f in files),
            "records": sum(f["records"] for f in files),
        }
        for label, files in sorted(hours.items(), reverse=True)
    ]


async def archive(request: web.Request) -> web.Response:
    """The dead-letter archive's files by hour, with sizes and record counts (ottermq extension)."""
    require_monitor(request)
    root = broker_of(request).settings.dlx_archive_dir
    if root is None:
        return web.json_response({"enabled": False, "dir": None, "hours": []})
    hours = await asyncio.to_thread(list_archive, Path(root))
    return web.json_response({"enabled": True, "dir": str(root), "hours": hours})


def _reports_root(request: web.Request) -> Path | None:
    root = broker_of(request).settings.dlx_reports_dir
    return Path(root) if root is not None else None


def _report_dir(request: web.Request) -> Path:
    root = _reports_root(request)
    name = request.match_info["name"]
    if root is None or "/" in name or name.startswith("."):
        raise NotFound()
    summary = root / name / "summary.json"
    if not _is_file(summary) or not inside(root, summary):
        raise NotFound()
    return root / name


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a name the file system refuses (too long, NUL) is not."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _summary(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


async def reports(request: web.Request) -> web.Response:
    """The `ottermq dlq report` outputs in OTTERMQ_DLX_REPORTS_DIR (ottermq extension)."""
    require_monitor(request)
    root = _reports_root(request)
    if root is None or not root.is_dir():
        shown = str(root) if root else None
        return web.json_response({"enabled": root is not None, "dir": shown, "reports": []})
    found = []
    for folder in root.iterdir():
        if folder.is_dir() and (folder / "summary.json").is_file() and inside(root, folder / "summary.json"):
            summary = _summary(folder)
            modified = int(os.path.getmtime(folder / "summary.json") * 1000)
            found.append(
                {
                    "name": folder.name,
                    "modified": modified,
                    "records": summary.get("records"),
                    "archive": summary.get("archive"),
                    "charts": summary.get("charts", []),
                }
            )
    found.sort(key=lambda r: r["modified"], reverse=True)
    return web.json_response({"enabled": True, "dir": str(root), "reports": found})


async def report(request: web.Request) -> web.Response:
    """One report: its summary.json and report.md (ottermq extension)."""
    require_monitor(request)
    folder = _report_dir(request)
    md = folder / "report.md"
    shown = md.is_file() and inside(folder.parent, md)
    text = md.read_text(encoding="utf-8", errors="replace") if shown else ""
    return web.json_response({"name": folder.name, "summary": _summary(folder), "markdown": text})


async def chart(request: web.Request) -> web.Response:
    """One of a report's PNG charts (ottermq extension)."""
    require_monitor(request)
    folder = _report_dir(request)
    name = request.match_info["file"]
    path = folder / "charts" / name
    if "/" in name or name.startswith(".") or not name.endswith(".png") or not _is_file(path):
        raise NotFound()
    if not inside(folder.parent, path):
        raise NotFound()
    return web.Response(body=path.read_bytes(), content_type="image/png")


def add_routes(routes: web.RouteTableDef, prefix: str) -> None:
    routes.get(f"{prefix}/dead-letter-archive")(archive)
    routes.get(f"{prefix}/dead-letter-archive/reports")(reports)
    routes.get(f"{prefix}/dead-letter-archive/reports/{{name}}")(report)
    routes.get(f"{prefix}/dead-letter-archive/reports/{{name}}/charts/{{file}}")(chart)
