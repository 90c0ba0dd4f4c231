#!/usr/bin/env python3
"""Opens a k6 web-dashboard HTML report in headless Chromium and fails unless it renders.

Two looks, both from a real browser run of the report's own JavaScript:
  1. the DOM after the scripts ran (`--dump-dom`): the report's header, at least MIN_CHARTS
     uPlot charts, each drawn on a canvas of non-zero size, series legends (http_reqs, vus),
     and, when --metric names are given, those custom metrics in the summary table;
  2. a screenshot (`--screenshot`): the charts put colour on the page (series lines and
     fills are saturated colours; an empty report is white and grey): at least MIN_INK of the
     pixels below the header are saturated.

    scripts/check_report.py REPORT.html [--metric ttft --metric itl ...] [--png OUT.png]

Chromium is Debian's (`apt-get install chromium`); it is an error, never a skip, when it is
missing. Exit 0 when the report renders, 1 with the reasons otherwise.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MIN_CHARTS = 6
# Share of saturated pixels the screenshot must hold (a rendered report: about 2-5%).
MIN_INK = 0.003
WINDOW = (1400, 2400)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("check_report: chromium is missing (Debian: apt-get install chromium)")


def browse(report: Path, *mode: str) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}",
           # Run the report's scripts (and their timers) to completion before the capture.
           "--virtual-time-budget=15000", *mode, report.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def dom_problems(dom: str, metrics: list[str]) -> list[str]:
    found = []
    if "Report:" not in dom:
        found.append("no report header: the page's scripts did not run")
    charts = dom.count('class="uplot')
    canvases = re.findall(r'<canvas width="(\d+)" height="(\d+)"', dom)
    drawn = [c for c in canvases if int(c[0]) > 0 and int(c[1]) > 0]
    if charts < MIN_CHARTS or len(drawn) < MIN_CHARTS:
        found.append(f"{charts} charts, {len(drawn)} sized canvases (want >= {MIN_CHARTS} each)")
    for label in ("http_reqs", "vus"):
        if f'class="u-label">{label}<' not in dom:
            found.append(f"no chart series labelled {label}")
    for m in metrics:
        if f">{m}<" not in dom:
            found.append(f"metric {m} is not in the report")
    return found


def ink(png: Path) -> float:
    """The share of saturated pixels below the page header."""
    from PIL import Image

    with Image.open(png) as img:
        w, h = img.size
        body = img.convert("RGB").crop((0, min(h - 1, 150), w, h)).convert("HSV")
    sat = body.split()[1].histogram()
    saturated = sum(sat[80:])
    return saturated / max(1, body.size[0] * body.size[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path)
    ap.add_argument("--metric", action="append", default=[], help="a metric the report must show")
    ap.add_argument("--png", type=Path, help="keep the screenshot here")
    args = ap.parse_args()
    if not args.report.is_file():
        print(f"check_report: {args.report} does not exist (k6 writes no report for a run "
              f"shorter than a few dashboard periods)", file=sys.stderr)
        return 1
    res = browse(args.report, "--dump-dom")
    if res.returncode != 0:
        print(f"check_report: chromium failed ({res.returncode}): {res.stderr[-2000:]}", file=sys.stderr)
        return 1
    problems = dom_problems(res.stdout, args.metric)
    with tempfile.TemporaryDirectory() as tmp:
        png = args.png or Path(tmp) / "report.png"
        shot = browse(args.report, f"--screenshot={png}")
        if shot.returncode != 0 or not png.is_file():
            problems.append(f"no screenshot (chromium exit {shot.returncode})")
        else:
            share = ink(png)
            if share < MIN_INK:
                problems.append(f"the screenshot is nearly blank: {share:.2%} saturated pixels "
                                f"(want >= {MIN_INK:.1%})")
    if problems:
        print(f"check_report: {args.report} does not render:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"check_report: {args.report.name} renders its charts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
