//! A hand-written SVG chart, four panels with strategies side by side: memory-slice allocation
//! over time, pods waiting over time, the wait-time distribution, and pods served.

use std::fmt::Write as _;

use super::{resample, Bucket};
use crate::metrics::Summary;

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 860.0;
const BUCKETS: usize = 240;

/// A stable colour per strategy; dashes mark the ones that never repartition. The dynamic ones
/// are drawn in order with narrowing strokes, so that where their lines coincide each stays
/// visible as a band inside the one drawn before.
fn style(strategy: &str, index: usize) -> (&'static str, &'static str) {
    match strategy {
        "whole-gpu" => ("#7f7f7f", "6 4"),
        "static:all-balanced" => ("#bcbd22", "6 4"),
        "static:all-1g" => ("#17becf", "2 3"),
        "greedy" => ("#ff7f0e", ""),
        "geometer" => ("#1f77b4", ""),
        "geometer-evict" => ("#2ca02c", ""),
        _ => (["#9467bd", "#8c564b", "#e377c2", "#d62728"][index % 4], ""),
    }
}

fn stroke_width(strategy: &str) -> f64 {
    match strategy {
        "greedy" => 5.0,
        "geometer" => 3.0,
        "geometer-evict" => 1.5,
        _ => 2.0,
    }
}

/// Wait-axis ticks people read without arithmetic.
const WAIT_TICKS: [(f64, &str); 10] = [
    (1.0, "1s"),
    (10.0, "10s"),
    (60.0, "1m"),
    (600.0, "10m"),
    (3600.0, "1h"),
    (36_000.0, "10h"),
    (86_400.0, "1d"),
    (864_000.0, "10d"),
    (8_640_000.0, "100d"),
    (86_400_000.0, "1000d"),
];

/// The subtitle in lines of at most ~170 characters, broken at "; ".
fn subtitle_lines(subtitle: &str) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for part in subtitle.split("; ") {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.len() + part.len() > 170 {
            lines.push(part.to_string());
        } else {
            if !last.is_empty() {
                last.push_str("; ");
            }
            last.push_str(part);
        }
    }
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| format!(r##"<text x="40" y="{}" class="sub">{}</text>"##, 52 + 16 * i, escape(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

struct Panel {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Panel {
    fn px(&self, fraction: f64) -> f64 {
        self.x + fraction.clamp(0.0, 1.0) * self.w
    }
    fn py(&self, fraction: f64) -> f64 {
        self.y + self.h - fraction.clamp(0.0, 1.0) * self.h
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A round step giving about five ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(10.0 * magnitude)
}

fn frame(out: &mut String, p: &Panel, title: &str, x_label: &str, y_label: &str) {
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" class="title">{}</text>"##,
        p.x,
        p.y - 12.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
        p.x, p.y, p.w, p.h
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="middle">{}</text>"##,
        p.x + p.w / 2.0,
        p.y + p.h + 34.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"##,
        p.x - 46.0,
        p.y + p.h / 2.0,
        p.x - 46.0,
        p.y + p.h / 2.0,
        escape(y_label)
    );
}

fn y_ticks(out: &mut String, p: &Panel, max: f64, label: impl Fn(f64) -> String) {
    let step = nice_step(max);
    let mut v = 0.0;
    while v <= max + step * 1e-9 {
        let y = p.py(v / max);
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            p.x,
            p.x + p.w
        );
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
            p.x - 6.0,
            y + 4.0,
            label(v)
        );
        v += step;
    }
}

fn time_ticks(out: &mut String, p: &Panel, end_s: f64) {
    let (unit, name) = if end_s >= 2.0 * 86_400.0 {
        (86_400.0, "d")
    } else if end_s >= 2.0 * 3600.0 {
        (3600.0, "h")
    } else if end_s >= 120.0 {
        (60.0, "min")
    } else {
        (1.0, "s")
    };
    let max = end_s / unit;
    let step = nice_step(max);
    let mut v = 0.0;
    while v <= max + step * 1e-9 {
        let x = p.px(v / max);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#444"/>"##,
            p.y + p.h,
            p.y + p.h + 5.0
        );
        let _ = writeln!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" class="tick" text-anchor="middle">{}{name}</text>"##,
            p.y + p.h + 18.0,
            trim(v)
        );
        v += step;
    }
}

fn trim(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str, dash: &str, width: f64) {
    let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        out,
        r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="{width}" stroke-dasharray="{dash}" stroke-linejoin="round"/>"##,
        path.join(" ")
    );
}

/// The chart; `title` and `subtitle` describe the trace, cluster and settings.
pub fn chart(summaries: &[Summary], title: &str, subtitle: &str) -> String {
    let mut out = String::new();
    header(&mut out, summaries, title, subtitle);
    let end = super::latest_end(summaries).max(1);
    let top = Panel { x: 80.0, y: 145.0, w: 480.0, h: 260.0 };
    let right_top = Panel { x: 680.0, y: 145.0, w: 480.0, h: 260.0 };
    let bottom = Panel { x: 80.0, y: 525.0, w: 480.0, h: 260.0 };
    let right_bottom = Panel { x: 680.0, y: 525.0, w: 480.0, h: 260.0 };
    let resampled: Vec<_> = summaries.iter().map(|s| resample(s, end, BUCKETS)).collect();
    allocation_panel(&mut out, &top, summaries, &resampled, end);
    pending_panel(&mut out, &right_top, summaries, &resampled, end);
    wait_panel(&mut out, &bottom, summaries);
    served_panel(&mut out, &right_bottom, summaries);
    out.push_str("</svg>\n");
    out
}

/// The SVG element, title, subtitle and legend.
fn header(out: &mut String, summaries: &[Summary], title: &str, subtitle: &str) {
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Arial, sans-serif">
<style>.title{{font-size:15px;font-weight:bold}} .axis{{font-size:13px}} .tick{{font-size:11px;fill:#333}} .legend{{font-size:13px}} .sub{{font-size:12px;fill:#444}}</style>
<rect width="100%" height="100%" fill="white"/>
<text x="40" y="30" style="font-size:19px;font-weight:bold">{}</text>
{}"##,
        escape(title),
        subtitle_lines(subtitle)
    );
    // Legend.
    let mut lx = 40.0;
    for (i, s) in summaries.iter().enumerate() {
        let (colour, dash) = style(&s.strategy, i);
        let _ = writeln!(
            out,
            r##"<line x1="{lx:.1}" y1="90" x2="{:.1}" y2="90" stroke="{colour}" stroke-width="3" stroke-dasharray="{dash}"/><text x="{:.1}" y="95" class="legend">{}</text>"##,
            lx + 28.0,
            lx + 34.0,
            escape(&s.strategy)
        );
        lx += 48.0 + 8.0 * s.strategy.len() as f64;
    }
}

/// 1. Memory-slice allocation over time.
fn allocation_panel(
    out: &mut String,
    top: &Panel,
    summaries: &[Summary],
    resampled: &[Vec<Bucket>],
    end: u64,
) {
    let end_s = end as f64 / 1000.0;
    frame(out, top, "Memory slices allocated to running pods", "time", "% of the cluster's memory slices");
    y_ticks(out, top, 1.0, |v| format!("{:.0}%", v * 100.0));
    time_ticks(out, top, end_s);
    for (i, (s, buckets)) in summaries.iter().zip(resampled).enumerate() {
        let (colour, dash) = style(&s.strategy, i);
        let points: Vec<(f64, f64)> = buckets
            .iter()
            .map(|b| (top.px((b.start + b.end) as f64 / 2.0 / end as f64), top.py(b.memory_share)))
            .collect();
        polyline(out, &points, colour, dash, stroke_width(&s.strategy));
    }
}

/// 2. Pods waiting over time.
fn pending_panel(
    out: &mut String,
    right_top: &Panel,
    summaries: &[Summary],
    resampled: &[Vec<Bucket>],
    end: u64,
) {
    let end_s = end as f64 / 1000.0;
    let max_pending = resampled.iter().flatten().map(|b| b.pending).fold(0.0, f64::max).max(1.0);
    let pending_top = (max_pending / nice_step(max_pending)).ceil() * nice_step(max_pending);
    frame(out, right_top, "Pods waiting (pending)", "time", "pods");
    y_ticks(out, right_top, pending_top, trim);
    time_ticks(out, right_top, end_s);
    for (i, (s, buckets)) in summaries.iter().zip(resampled).enumerate() {
        let (colour, dash) = style(&s.strategy, i);
        let points: Vec<(f64, f64)> = buckets
            .iter()
            .map(|b| {
                (
                    right_top.px((b.start + b.end) as f64 / 2.0 / end as f64),
                    right_top.py(b.pending / pending_top),
                )
            })
            .collect();
        polyline(out, &points, colour, dash, stroke_width(&s.strategy));
    }
}

/// 3. Wait distribution: share of all pods started within a wait (log scale).
fn wait_panel(out: &mut String, bottom: &Panel, summaries: &[Summary]) {
    let max_wait =
        summaries.iter().filter_map(|s| s.waits.last()).max().copied().unwrap_or(0) as f64 / 1000.0;
    let decades = max_wait.max(10.0).log10().ceil().max(1.0);
    frame(
        out,
        bottom,
        "Wait before start (served pods; curves end at the share served)",
        "wait (log scale; 1s and less at the left edge)",
        "% of all pods started within",
    );
    y_ticks(out, bottom, 1.0, |v| format!("{:.0}%", v * 100.0));
    for (seconds, label) in WAIT_TICKS.iter().filter(|(s, _)| s.log10() <= decades + 1e-9) {
        let x = bottom.px(seconds.log10() / decades);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            bottom.y,
            bottom.y + bottom.h
        );
        let _ = writeln!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" class="tick" text-anchor="middle">{label}</text>"##,
            bottom.y + bottom.h + 18.0
        );
    }
    for (i, s) in summaries.iter().enumerate() {
        let (colour, dash) = style(&s.strategy, i);
        let total = s.pods.max(1) as f64;
        let mut points = Vec::new();
        let mut k = 0usize;
        for step in 0..=200 {
            let x = decades * f64::from(step) / 200.0;
            let limit_ms = 10f64.powf(x) * 1000.0;
            while k < s.waits.len() && (s.waits[k] as f64) <= limit_ms {
                k += 1;
            }
            points.push((bottom.px(x / decades), bottom.py(k as f64 / total)));
        }
        polyline(out, &points, colour, dash, stroke_width(&s.strategy));
    }
}

/// 4. Pods served and not served.
fn served_panel(out: &mut String, right_bottom: &Panel, summaries: &[Summary]) {
    let p = right_bottom;
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" class="title">Pods served (colour) and never served (grey)</text>"##,
        p.x,
        p.y - 12.0
    );
    let pods = summaries.iter().map(|s| s.pods).max().unwrap_or(1).max(1) as f64;
    let row = p.h / summaries.len().max(1) as f64;
    for (i, s) in summaries.iter().enumerate() {
        let (colour, _) = style(&s.strategy, i);
        let y = p.y + row * i as f64 + row * 0.15;
        let bar = row * 0.7;
        let (x0, w) = (p.x + 130.0, p.w - 130.0);
        let served_w = w * s.served as f64 / pods;
        let rest_w = w * s.not_served as f64 / pods;
        let label = format!("{} served", s.served);
        // White on the bar when it is wide enough for the label, else dark just after it.
        let inside = served_w >= 12.0 + 8.5 * label.len() as f64;
        let (label_x, label_fill) = if inside { (x0 + 6.0, "white") } else { (x0 + served_w + 6.0, "#222") };
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="axis" text-anchor="end">{}</text>
<rect x="{x0:.1}" y="{y:.1}" width="{served_w:.1}" height="{bar:.1}" fill="{colour}"/>
<rect x="{:.1}" y="{y:.1}" width="{rest_w:.1}" height="{bar:.1}" fill="#ccc"/>
<text x="{label_x:.1}" y="{:.1}" class="axis" fill="{label_fill}" style="font-weight:bold">{label}</text>
<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{} not</text>"##,
            x0 - 8.0,
            y + bar / 2.0 + 5.0,
            escape(&s.strategy),
            x0 + served_w,
            y + bar / 2.0 + 5.0,
            x0 + w - 4.0,
            y + bar / 2.0 + 4.0,
            s.not_served
        );
    }
}

#[cfg(test)]
mod tests {
    use super::nice_step;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(1.0), 0.2);
        assert_eq!(nice_step(100.0), 20.0);
        assert_eq!(nice_step(37.0), 10.0);
    }
}
