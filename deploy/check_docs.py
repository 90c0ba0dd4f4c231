#!/usr/bin/env python3
"""Keep the monitoring docs and rules true to the code: run by `make dashboard-check`.

- every metric family of src/metrics/names.rs has a row in the metric table of
  docs/monitoring.md;
- every `kiln_...` name written in the README, docs/*.md or the Prometheus files is a family
  kiln exports (histogram suffixes _bucket/_sum/_count allowed), and every `kiln:...` name is a
  recording rule of rules.yml: a renamed metric cannot leave a rule or a doc reading nothing;
- every alert's runbook_url anchor is a section of docs/runbook.md, every section of the
  runbook is an alert, every in-page link of the runbook resolves, and the alert table of
  docs/monitoring.md lists every alert;
- every relative link in README.md and docs/*.md names a file that exists and, into a Markdown
  file, a heading that exists;
- README.md stays the front door: at most README_MAX_LINES lines (the detail lives in docs/).
Standard library only.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = ROOT / "src/metrics/names.rs"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MONITORING = DOCS / "monitoring.md"
RUNBOOK = ROOT / "docs/runbook.md"
PROM = ROOT / "deploy/prometheus"
# The front door's budget: a merge that pastes old sections back in fails here, loudly.
README_MAX_LINES = 300


def slug(heading):
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def expand(token):
    """kiln:x:{p50,p95}_5m -> kiln:x:p50_5m, kiln:x:p95_5m"""
    m = re.search(r"\{([\w,]+)\}", token)
    if not m:
        return [token]
    return [t for alt in m.group(1).split(",") for t in expand(token[:m.start()] + alt + token[m.end():])]


def headings(path):
    """The anchors of a Markdown file's headings (outside code blocks)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def check_links(paths):
    """Relative links ([text](target)) in `paths` that name no file, or no heading of one."""
    problems = []
    for path in paths:
        text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
        for target in sorted(set(re.findall(r"\]\(([^)\s]+)\)", text))):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}: link {target}"
            if not dest.exists():
                problems.append(f"{where} names no file")
            elif anchor and dest.suffix == ".md" and anchor not in headings(dest):
                problems.append(f"{where} names no heading of {dest.relative_to(ROOT)}")
    return problems


def main():
    problems = []
    families = set(re.findall(r'pub const [A-Z_]+: &str = "(kiln_[a-z_]+)";', NAMES.read_text()))
    records = set(re.findall(r"^\s*- record:\s*(\S+)", (PROM / "rules.yml").read_text(), re.M))
    alerts_text = (PROM / "alerts.yml").read_text()
    alerts = re.findall(r"^\s*- alert:\s*(\S+)", alerts_text, re.M)
    readme = README.read_text()
    runbook = RUNBOOK.read_text()
    monitoring = MONITORING.read_text()
    docs = [README, *sorted(DOCS.glob("*.md"))]

    metrics_section = monitoring.split("\n## Metrics\n", 1)[-1].split("\n## ", 1)[0]
    for f in sorted(families):
        if not re.search(rf"^\| `{f}` \|", metrics_section, re.M):
            problems.append(f"docs/monitoring.md Metrics: no row for {f}")

    sources = [*docs, PROM / "rules.yml", PROM / "alerts.yml.in", PROM / "thresholds.toml",
               *sorted((PROM / "tests").glob("*.yml"))]
    for path in sources:
        text = path.read_text()
        for name in sorted(set(re.findall(r"\bkiln_[a-z_]+[a-z]", text))):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in families and base not in families:
                problems.append(f"{path.relative_to(ROOT)}: {name} is not a metric family of names.rs")
        for token in sorted(set(re.findall(r"\bkiln:[a-z][a-z_]*:(?:\w|\{[\w,]+\})+", text))):
            for name in expand(token):
                if name not in records:
                    problems.append(f"{path.relative_to(ROOT)}: {name} is not a recording rule")

    sections = {slug(h): h for h in re.findall(r"^## (.+)$", runbook, re.M)}
    for alert, url in re.findall(r"- alert: (\S+)[\s\S]*?runbook_url: (\S+)", alerts_text):
        anchor = url.rsplit("#", 1)[-1]
        if anchor not in sections:
            problems.append(f"alerts.yml: {alert}'s runbook_url #{anchor} is no section of the runbook")
        if sections.get(anchor) != alert:
            problems.append(f"alerts.yml: {alert} links to the section {sections.get(anchor)!r}")
    for anchor, heading in sections.items():
        if heading not in alerts:
            problems.append(f"docs/runbook.md: section {heading!r} is no alert")
    for anchor in sorted(set(re.findall(r"\]\(#([\w-]+)\)", runbook))):
        if anchor not in sections:
            problems.append(f"docs/runbook.md: link #{anchor} goes nowhere")
    for alert in alerts:
        if f"[{alert}](runbook.md#{slug(alert)})" not in monitoring:
            problems.append(f"docs/monitoring.md: the alert table lacks {alert}")

    problems += check_links(docs)
    n_lines = readme.count("\n")
    if n_lines > README_MAX_LINES:
        problems.append(f"README.md: {n_lines} lines, more than {README_MAX_LINES}: put the detail in docs/")

    for p in problems:
        print(f"check_docs: {p}", file=sys.stderr)
    print(f"check_docs: {len(families)} families, {len(records)} rules, {len(alerts)} alerts, "
          f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
