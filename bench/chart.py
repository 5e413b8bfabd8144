"""The performance record's chart: requests/s and p99 against clients for
every front, one row of two panels per (backend, request), as a standalone SVG
(no plotting library: the record must build from Debian's base packages).

    python3 bench/chart.py bench/results/<time>.json docs/performance.svg

bench/run calls svg() itself and writes the chart beside the record.  The
points are the means over rounds; the bars are their 95% intervals."""
import json
import math
import sys

COLORS = {"direct": "#7f7f7f", "vsr": "#d62728", "nginx": "#1f77b4", "haproxy": "#2ca02c"}
PW, PH = 330, 190            # one panel
ML, MR, MT, MB = 62, 14, 26, 34  # its margins
TITLE_H, LEGEND_H = 30, 26


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_max(v):
    """An axis top whose quarters are round: 1, 2, 4, 6 or 8 times a power of ten, at or above v."""
    if v <= 0:
        return 1.0
    p = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 4, 6, 8, 10):
        if v <= m * p:
            return m * p
    return 10 * p


def fmt(v):
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def ok(ci):
    return ci is not None and not math.isnan(ci) and ci > 0


def panel(out, x0, y0, title, clients, series, unit):
    """series: front -> [(mean, ci95) per client]."""
    top = nice_max(max((m + (c if ok(c) else 0)) for pts in series.values() for m, c in pts))
    w, h = PW - ML - MR, PH - MT - MB
    X = lambda i: x0 + ML + (w * i / (len(clients) - 1) if len(clients) > 1 else w / 2)
    Y = lambda v: y0 + MT + h - h * v / top
    out.append(f'<text x="{x0 + ML}" y="{y0 + 16}" font-size="12" font-weight="bold">{esc(title)}</text>')
    for k in range(5):
        v = top * k / 4
        y = Y(v)
        out.append(f'<line x1="{x0 + ML}" y1="{y:.1f}" x2="{x0 + ML + w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 + ML - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{fmt(v)}</text>')
    for i, c in enumerate(clients):
        out.append(f'<text x="{X(i):.1f}" y="{y0 + MT + h + 14}" font-size="10" text-anchor="middle">{c}</text>')
    out.append(f'<text x="{x0 + ML + w / 2}" y="{y0 + PH - 4}" font-size="10" text-anchor="middle">clients</text>')
    out.append(f'<text x="{x0 + 12}" y="{y0 + MT + h / 2}" font-size="10" text-anchor="middle" '
               f'transform="rotate(-90 {x0 + 12} {y0 + MT + h / 2})">{esc(unit)}</text>')
    for front, pts in series.items():
        col = COLORS.get(front, "#000")
        path = " ".join(f"{'M' if i == 0 else 'L'}{X(i):.1f},{Y(m):.1f}" for i, (m, _) in enumerate(pts))
        width = 2.5 if front == "vsr" else 1.5
        out.append(f'<path d="{path}" fill="none" stroke="{col}" stroke-width="{width}"/>')
        for i, (m, ci) in enumerate(pts):
            if ok(ci):
                out.append(f'<line x1="{X(i):.1f}" y1="{Y(max(m - ci, 0)):.1f}" x2="{X(i):.1f}" '
                           f'y2="{Y(m + ci):.1f}" stroke="{col}" stroke-width="1"/>')
            out.append(f'<circle cx="{X(i):.1f}" cy="{Y(m):.1f}" r="2.5" fill="{col}"/>')


def svg(results, title="vsr against nginx, HAProxy and no proxy"):
    """The chart of a bench/run results dict, or None when it has no throughput."""
    thr = results.get("throughput", {}).get("summary")
    if not thr:
        return None
    keys = [k.split("|") for k in thr]
    pairs = sorted({(b, r) for b, r, _, _ in keys}, key=lambda p: (p[0], ["small", "keyword", "64k"].index(p[1])
                                                                   if p[1] in ("small", "keyword", "64k") else 9))
    clients = sorted({int(c) for _, _, c, _ in keys})
    fronts = [f for f in COLORS if any(k[3] == f for k in keys)]
    W = 2 * PW + 20
    H = TITLE_H + LEGEND_H + len(pairs) * PH + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">{esc(title)}</text>']
    lx = 10
    for f in fronts:
        out.append(f'<line x1="{lx}" y1="{TITLE_H + 9}" x2="{lx + 20}" y2="{TITLE_H + 9}" stroke="{COLORS[f]}" '
                   f'stroke-width="{2.5 if f == "vsr" else 1.5}"/>')
        out.append(f'<text x="{lx + 25}" y="{TITLE_H + 13}" font-size="11">{f}</text>')
        lx += 95
    out.append(f'<text x="{lx + 10}" y="{TITLE_H + 13}" font-size="10" fill="#555">(mean over rounds, bar: 95% '
               'interval)</text>')
    for row, (be, kind) in enumerate(pairs):
        y0 = TITLE_H + LEGEND_H + row * PH
        for col, (metric, unit) in enumerate((("rps", "requests/s"), ("p99_ms", "p99 ms"))):
            series = {}
            for f in fronts:
                pts = []
                for c in clients:
                    s = thr.get(f"{be}|{kind}|{c}|{f}")
                    pts.append((s[metric]["mean"], s[metric].get("ci95")) if s else (0.0, None))
                series[f] = pts
            panel(out, col * (PW + 20), y0, f"{be}, {kind} request: {unit}", clients, series, unit)
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: bench/chart.py RESULTS.json OUT.svg")
    doc = svg(json.load(open(sys.argv[1])))
    if doc is None:
        raise SystemExit(f"{sys.argv[1]}: no throughput results")
    open(sys.argv[2], "w").write(doc)
