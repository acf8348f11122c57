#!/usr/bin/env python3
"""Renders Geometer's Grafana dashboard (deploy/helm/geometer/files/dashboard.json) as an image,
with data from a real run: it starts `geometer demo --metrics-addr`, scrapes /metrics every
second until the demo ends, evaluates each panel's PromQL over the scrapes and draws the panels
where the dashboard places them. No Grafana runs here; this draws the same queries.

The evaluator knows the PromQL the dashboard uses, no more: `sum`/`max` with `by`, `rate`,
`histogram_quantile` over `sum by (le, ...)` and `/` between two aggregations; a query it
cannot read is drawn as "unsupported". Rates over windows longer than the run use the whole run.

    scripts/render-dashboard.py target/debug/geometer docs/images/dashboard.png
Needs matplotlib (pip install matplotlib).
"""
import json, math, re, subprocess, sys, time, urllib.request
from collections import defaultdict

def scrape(url):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)', line)
        if not m:
            continue
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out

def run_demo(geometer, port):
    args = [geometer, "demo", "--nodes", "4", "--duration", "120", "--speed", "3", "--tick", "30",
            "--metrics-addr", f"127.0.0.1:{port}"]
    demo = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples, start = [], time.time()
    while demo.poll() is None:
        try:
            samples.append((time.time() - start, scrape(f"http://127.0.0.1:{port}/metrics")))
        except OSError:
            pass
        time.sleep(1)
    return samples

def select(samples, i, name):
    return {lab: v for (n, lab), v in samples[i][1].items() if n == name}

def rate(samples, i, name, window):
    t, now = samples[i][0], select(samples, i, name)
    j = i
    while j > 0 and t - samples[j - 1][0] <= window:
        j -= 1
    if j == i:
        return {}
    before, dt = select(samples, j, name), t - samples[j][0]
    return {lab: max(v - before.get(lab, 0.0), 0.0) / dt for lab, v in now.items()}

def group(vector, by, agg):
    out = defaultdict(list)
    for lab, v in vector.items():
        out[tuple((k, val) for k, val in lab if k in by)].append(v)
    return {k: (sum(vs) if agg == "sum" else max(vs)) for k, vs in out.items()}

SECONDS = {"s": 1, "m": 60, "h": 3600}

def evaluate(expr, samples, i):
    expr = expr.strip()
    m = re.match(r'^histogram_quantile\(([\d.]+), (.*)\)$', expr)
    if m:
        inner, q = evaluate(m.group(2), samples, i), float(m.group(1))
        buckets = defaultdict(list)
        for lab, v in inner.items():
            le = dict(lab)["le"]
            buckets[tuple(kv for kv in lab if kv[0] != "le")].append((float("inf") if le == "+Inf" else float(le), v))
        out = {}
        for lab, bs in buckets.items():
            bs.sort()
            total = bs[-1][1]
            if total <= 0:
                continue
            rank, prev_le, prev_c = q * total, 0.0, 0.0
            for le, c in bs:
                if c >= rank:
                    out[lab] = prev_le if math.isinf(le) else prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12)
                    break
                prev_le, prev_c = le, c
        return out
    depth = 0
    for k, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and expr[k:k + 3] == " / ":
            a, b = evaluate(expr[:k], samples, i), evaluate(expr[k + 3:], samples, i)
            return {lab: a[lab] / b[lab] for lab in a if b.get(lab)}
    m = re.match(r'^(sum|max)(?: by \(([^)]*)\))? ?\((.*)\)$', expr)
    if m:
        by = [s.strip() for s in (m.group(2) or "").split(",") if s.strip()]
        return group(evaluate(m.group(3), samples, i), by, m.group(1))
    m = re.match(r'^rate\((\w+)\[(\d+)([smh])\]\)$', expr)
    if m:
        return rate(samples, i, m.group(1), int(m.group(2)) * SECONDS[m.group(3)])
    if re.match(r'^\w+$', expr):
        return select(samples, i, expr)
    raise ValueError(expr)

def legend(fmt, lab):
    d = dict(lab)
    return re.sub(r'\{\{(\w+)\}\}', lambda m: d.get(m.group(1), ""), fmt) or ", ".join(f"{k}={v}" for k, v in lab)

def draw(dashboard, samples, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    fig = plt.figure(figsize=(18, rows * 0.42))
    fig.patch.set_facecolor("#111217")
    fig.suptitle(f'{dashboard["title"]}: geometer demo (4 nodes x 8 GPUs, 120 scenario s), scraped every second',
                 color="#ccccdc", fontsize=13)
    for p in dashboard["panels"]:
        g = p["gridPos"]
        ax = fig.add_axes([g["x"] / 24 + 0.03, 1 - (g["y"] + g["h"]) / rows + 0.035, g["w"] / 24 - 0.04, g["h"] / rows - 0.075])
        ax.set_facecolor("#181b1f")
        ax.set_title(p["title"], color="#ccccdc", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        for t in p["targets"]:
            try:
                series = defaultdict(list)
                for i in range(len(samples)):
                    for lab, v in evaluate(t["expr"], samples, i).items():
                        series[lab].append((samples[i][0], v))
            except ValueError:
                ax.text(0.5, 0.5, "unsupported query", color="#ccccdc", ha="center", transform=ax.transAxes)
                continue
            for lab, points in sorted(series.items()):
                ax.plot([x for x, _ in points], [y for _, y in points], linewidth=1.2, label=legend(t.get("legendFormat", ""), lab))
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", facecolor="#181b1f", labelcolor="#ccccdc", edgecolor="#2c3235", ncol=2)
        else:
            ax.text(0.5, 0.5, "no data in this run", color="#8e8e8e", ha="center", transform=ax.transAxes)
        ax.set_xlabel("seconds", color="#8e8e8e", fontsize=7)
    fig.savefig(out, dpi=90, facecolor=fig.get_facecolor())

def main():
    geometer, out = sys.argv[1], sys.argv[2]
    dashboard = json.load(open("deploy/helm/geometer/files/dashboard.json"))
    samples = run_demo(geometer, 19187)
    if len(samples) < 5:
        sys.exit("render-dashboard: the demo's /metrics gave too few scrapes")
    draw(dashboard, samples, out)
    print(f"{out}: {len(samples)} scrapes")

if __name__ == "__main__":
    main()
