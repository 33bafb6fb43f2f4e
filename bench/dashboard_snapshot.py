"""Dashboard snapshot: the chart's Grafana dashboard drawn from a real Prometheus, not from Grafana.

Starts `memory-mcp serve` (embedded PostgreSQL, in-process model) in a temporary data dir and
Debian's `prometheus` on loopback scraping its /metrics every second (with the chart's alert rules
loaded), drives real MCP and REST traffic (every tool, refusals, bad keys) with one to three
concurrent clients, then runs every panel query of charts/memory-mcp/dashboards/memory-mcp.json as
a range query and draws the dashboard's layout (gridPos, titles, units, legends) as SVG charts in
an HTML page, which headless Chromium turns into a PNG.

    python -m bench.dashboard_snapshot [--seconds 90] [--out docs/images/dashboard.png]

Needs `prometheus` and `chromium` (Debian packages) on PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import itertools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import free_port, wait_ready
from tests.observability.dashboard import Panel, load_dashboard, panels, runnable
from tests.observability.prometheus import LivePrometheus, prometheus_binary
from tests.observability.rules import rendered_rule_groups
from tests.observability.traffic import TrafficLog, one_round

BOOTSTRAP_SPACE = "default"
# (concurrent clients, share of the run): a quiet start, a busy middle, a calmer end.
PHASES = ((1, 0.3), (3, 0.4), (2, 0.3))
RATE_INTERVAL = "15s"
STEP_S = 2.0
COLUMN_PX = 66  # Grafana's grid is 24 columns wide
ROW_PX = 26  # one gridPos height unit
GAP_PX = 8
HEADER_PX = 86
PALETTE = ("#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a", "#37872d")


@dataclass
class Series:
    legend: str
    points: list[tuple[float, float]]  # (unix time, value); NaN where Prometheus had no number


@dataclass
class Snapshot:
    start: float
    end: float
    panels: list[Panel]
    series: dict[int, list[Series]]  # panel id -> series of all its queries
    errors: dict[int, str]  # panel id -> the first query error, if any
    alerts: list[dict[str, Any]]
    traffic: TrafficLog


# --- the live run -------------------------------------------------------------------------------


async def start_server(data_dir: Path, port: int) -> asyncio.subprocess.Process:
    env = {**os.environ, "MEMORY_MCP_LOG_LEVEL": "warning"}
    command = [
        sys.executable,
        "-m",
        "memory_mcp.cli",
        "serve",
        "--data-dir",
        str(data_dir),
        "--port",
        str(port),
    ]
    return await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )


async def stop_server(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def drive_phases(base: str, key: str, seconds: float) -> TrafficLog:
    """Rounds of traffic from 1, then 3, then 2 concurrent clients, for ``seconds`` in all."""
    log = TrafficLog()
    numbers = itertools.count()

    async def client(stop_at: float) -> None:
        while time.monotonic() < stop_at:
            await one_round(base, key, BOOTSTRAP_SPACE, next(numbers), log)

    for clients, share in PHASES:
        stop_at = time.monotonic() + seconds * share
        await asyncio.gather(*(client(stop_at) for _ in range(clients)))
    return log


def legend_of(template: str, labels: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip()
    return text or ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"


async def collect(prom: LivePrometheus, dashboard: dict[str, Any], start: float, end: float) -> Snapshot:
    snapshot = Snapshot(start, end, panels(dashboard), {}, {}, [], TrafficLog())
    for panel in snapshot.panels:
        found: list[Series] = []
        for query in panel.queries:
            expr = runnable(query.expr, dashboard, rate_interval=RATE_INTERVAL)
            body = await prom.query_range(expr, start, end, STEP_S)
            if body["status"] != "success":
                snapshot.errors.setdefault(panel.id, f"{body.get('errorType')}: {body.get('error')}")
                continue
            for result in body["data"]["result"]:
                points = [(float(t), float(v)) for t, v in result["values"]]
                found.append(Series(legend_of(query.legend, result["metric"]), points))
        snapshot.series[panel.id] = sorted(found, key=lambda s: s.legend)
    snapshot.alerts = await prom.active_alerts()
    return snapshot


async def run(seconds: float) -> Snapshot:
    binary = prometheus_binary()
    if binary is None:
        raise SystemExit("prometheus not found: apt-get install prometheus")
    dashboard = load_dashboard()
    with tempfile.TemporaryDirectory(prefix="memory-mcp-snapshot-") as tmp:
        root = Path(tmp)
        (root / "prometheus").mkdir()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = await start_server(root / "data", port)
        try:
            await wait_ready(base)
            key = (root / "data" / "bootstrap-key").read_text().strip()
            async with LivePrometheus(
                binary, root / "prometheus", f"127.0.0.1:{port}", rendered_rule_groups()
            ) as prom:
                await prom.wait_for_scrapes(3)
                start = time.time() - 3
                traffic = await drive_phases(base, key, seconds)
                await prom.wait_for_scrapes(await prom.successful_scrapes() + 3)
                snapshot = await collect(prom, dashboard, start, time.time())
                snapshot.traffic = traffic
        finally:
            await stop_server(server)
    return snapshot


# --- drawing ------------------------------------------------------------------------------------


def format_value(value: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "s":
        if value == 0:
            return "0 s"
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    if abs(value) >= 1000:
        return f"{value / 1000:.3g}k{suffix}"
    return f"{value:.3g}{suffix}"


def nice_step(span: float, intervals: int = 4) -> float:
    """A 1, 2, 2.5 or 5 times a power of ten that splits ``span`` into at most ``intervals`` parts."""
    rough = span / intervals if span > 0 else 0.25
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= rough * 0.999)


def polyline_segments(points: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Runs of finite points; NaN values and missing steps break the line, as in Grafana."""
    segments: list[list[tuple[float, float]]] = [[]]
    previous: float | None = None
    for t, v in points:
        if not math.isfinite(v) or (previous is not None and t - previous > STEP_S * 1.5):
            segments.append([])
        if math.isfinite(v):
            segments[-1].append((t, v))
        previous = t
    return [segment for segment in segments if segment]


def chart_svg(series: list[Series], unit: str, width: int, height: int, start: float, end: float) -> str:
    left, right, top, bottom = 64, 10, 6, 20
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for s in series for _, v in s.points if math.isfinite(v)]
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    if not values:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" class="nodata">No data</text></svg>')
        return "".join(parts)
    step = nice_step(max(values) - min(0.0, min(values)))
    y_max = step * max(1, math.ceil(max(values) / step - 1e-9))
    y_min = -step * math.ceil(-min(values) / step) if min(values) < 0 else 0.0

    def x_of(t: float) -> float:
        return left + (t - start) / (end - start) * plot_w

    def y_of(v: float) -> float:
        return top + plot_h - (v - y_min) / (y_max - y_min) * plot_h

    for i in range(round((y_max - y_min) / step) + 1):
        v = y_min + step * i
        y = y_of(v)
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" class="ytick">{html.escape(format_value(v, unit))}</text>'
        )
    tick = 30.0
    t = math.ceil(start / tick) * tick
    while t <= end:
        x = x_of(t)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" class="grid"/>')
        label = time.strftime("%H:%M:%S", time.gmtime(t))
        parts.append(f'<text x="{x:.1f}" y="{height - 4}" class="xtick">{label}</text>')
        t += tick
    for index, one in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        for segment in polyline_segments(one.points):
            coords = " ".join(f"{x_of(t):.1f},{y_of(v):.1f}" for t, v in segment)
            if len(segment) == 1:
                ((t, v),) = segment
                parts.append(f'<circle cx="{x_of(t):.1f}" cy="{y_of(v):.1f}" r="2" fill="{color}"/>')
            else:
                parts.append(f'<polyline points="{coords}" stroke="{color}" class="line"/>')
    parts.append("</svg>")
    return "".join(parts)


def panel_html(panel: Panel, snapshot: Snapshot) -> str:
    width = panel.w * COLUMN_PX - GAP_PX
    height = panel.h * ROW_PX - GAP_PX
    left, top = panel.x * COLUMN_PX, HEADER_PX + panel.y * ROW_PX
    series = snapshot.series.get(panel.id, [])
    legend = "".join(
        f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{html.escape(s.legend)}</span>'
        for i, s in enumerate(series)
    )
    legend_rows = math.ceil(len(series) / max(1, width // 150)) if series else 0
    chart_h = height - 30 - 16 * min(legend_rows, 3) - 6
    body = (
        f'<div class="error">{html.escape(snapshot.errors[panel.id])}</div>'
        if panel.id in snapshot.errors
        else chart_svg(series, panel.unit, width - 8, chart_h, snapshot.start, snapshot.end)
    )
    style = f"left:{left}px;top:{top}px;width:{width}px;height:{height}px"
    return (
        f'<div class="panel" style="{style}"><div class="title">{html.escape(panel.title)}</div>'
        f'{body}<div class="legend">{legend}</div></div>'
    )


def rows_html(dashboard: dict[str, Any]) -> str:
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    return "".join(
        f'<div class="row" style="top:{HEADER_PX + r["gridPos"]["y"] * ROW_PX}px">{html.escape(r["title"])}</div>'
        for r in rows
    )


CSS = """
body { margin: 0; background: #111217; color: #ccccdc; font: 13px 'DejaVu Sans', sans-serif; }
.header { position: absolute; left: 0; top: 0; width: 1576px; padding: 12px 12px 0; }
.header h1 { margin: 0 0 4px; font-size: 20px; color: #fff; font-weight: 500; }
.header p { margin: 2px 0; color: #9fa3ad; font-size: 12px; }
.row { position: absolute; left: 8px; font-size: 15px; color: #fff; font-weight: 500; }
.panel { position: absolute; background: #181b1f; border: 1px solid #2c3235; border-radius: 3px;
         box-sizing: border-box; padding: 0 4px; overflow: hidden; margin-left: 8px; }
.title { height: 26px; line-height: 26px; font-weight: 500; color: #fff; padding-left: 4px; }
.legend { font-size: 11px; line-height: 16px; max-height: 48px; overflow: hidden; padding-left: 60px; }
.legend span { display: inline-block; min-width: 140px; margin-right: 8px; white-space: nowrap; }
.legend i { display: inline-block; width: 12px; height: 3px; margin: 0 5px 3px 0; }
.error { color: #f2495c; padding: 8px; }
svg .grid { stroke: #2c3235; stroke-width: 1; }
svg .line { fill: none; stroke-width: 1.6; }
svg text { fill: #9fa3ad; font-size: 10px; font-family: 'DejaVu Sans', sans-serif; }
svg .ytick { text-anchor: end; }
svg .xtick { text-anchor: middle; }
svg .nodata { text-anchor: middle; font-size: 13px; }
"""


def page_html(dashboard: dict[str, Any], snapshot: Snapshot) -> str:
    span = f"{time.strftime('%H:%M:%S', time.gmtime(snapshot.start))}-{time.strftime('%H:%M:%S', time.gmtime(snapshot.end))} UTC"
    calls = sum(snapshot.traffic.tool_calls.values())
    firing = (
        ", ".join(f"{a['labels']['alertname']} ({a['state']})" for a in snapshot.alerts)
        or "none pending or firing"
    )
    header = (
        f'<div class="header"><h1>{html.escape(dashboard["title"])}</h1>'
        f"<p>Drawn from live Prometheus range queries of every panel (step {STEP_S:g}s, "
        f"$__rate_interval={RATE_INTERVAL}, namespace=.*) while a real memory-mcp serve answered "
        f"{calls} MCP tool calls plus REST requests from 1-3 clients; {span}. Not a Grafana render.</p>"
        f"<p>Alert rules of the chart evaluated by the same Prometheus: {html.escape(firing)}. "
        f"The Operator row is empty: no operator ran.</p></div>"
    )
    body = rows_html(dashboard) + "".join(panel_html(p, snapshot) for p in snapshot.panels)
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>{header}{body}</body></html>"


def page_height(snapshot: Snapshot) -> int:
    return HEADER_PX + max(p.y + p.h for p in snapshot.panels) * ROW_PX + GAP_PX


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium not found: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="memory-mcp-chromium-") as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--force-device-scale-factor=1",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                f"--window-size={width},{height}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=90.0, help="how long to drive traffic")
    parser.add_argument("--out", type=Path, default=Path("docs/images/dashboard.png"))
    parser.add_argument("--html", type=Path, help="also keep the HTML page here")
    args = parser.parse_args()
    snapshot = asyncio.run(run(args.seconds))
    dashboard = load_dashboard()
    with tempfile.TemporaryDirectory(prefix="memory-mcp-page-") as tmp:
        page = Path(args.html or Path(tmp) / "dashboard.html").resolve()
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(page_html(dashboard, snapshot))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        screenshot(page, args.out.resolve(), 24 * COLUMN_PX + 2 * GAP_PX, page_height(snapshot))
    empty = [p.title for p in snapshot.panels if not snapshot.series.get(p.id)]
    print(f"{sum(snapshot.traffic.tool_calls.values())} tool calls; {len(snapshot.panels)} panels drawn")
    print(f"query errors: {snapshot.errors or 'none'}; panels without data: {', '.join(empty) or 'none'}")
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
