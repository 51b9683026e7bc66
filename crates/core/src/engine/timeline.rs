//! Timelines of jobs (or of whole compiles, one lane per worker): `--timings` writes a
//! self-contained HTML page — an inline SVG timeline and a table, no network fetches — and
//! `--trace` writes the same as Chrome trace-event JSON (opens in Perfetto / chrome://tracing).

use serde_json::json;

/// One bar of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The lane (row) it is drawn in.
    pub lane: String,
    /// The text on the bar (a job's name, a compile's stem).
    pub label: String,
    /// Where the bar starts: seconds from the start of the run it belongs to.
    pub start_s: f64,
    /// Where the bar ends, in the same seconds.
    pub end_s: f64,
    /// `ok`, `failed`, ... (colours the bar).
    pub status: String,
    /// Extra columns for the table and the trace's `args`.
    pub details: Vec<(String, String)>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn colour(status: &str) -> &'static str {
    match status {
        "ok" | "hit" => "#4c9a6a",
        "skipped" => "#9aa4ad",
        "failed" | "timed_out" => "#c8553d",
        "cancelled" => "#d9a441",
        _ => "#5b7db1",
    }
}

fn lanes(spans: &[Span]) -> Vec<String> {
    let mut lanes: Vec<String> = Vec::new();
    for s in spans {
        if !lanes.contains(&s.lane) {
            lanes.push(s.lane.clone());
        }
    }
    lanes
}

/// A tick at `t` seconds, ticks `step` seconds apart: in ms below a second of ticks, in s below
/// ten minutes, else in min, with as many decimals as tell neighbouring ticks apart.
fn tick_label(t: f64, step: f64) -> String {
    let (scale, unit) = match step * 10.0 {
        span if span < 1.0 => (1e3, "ms"),
        span if span < 600.0 => (1.0, "s"),
        _ => (1.0 / 60.0, "min"),
    };
    let step = step * scale;
    let decimals = if step > 0.0 {
        (-step.log10()).ceil().clamp(0.0, 3.0) as usize
    } else {
        0
    };
    format!("{:.*} {unit}", decimals, t * scale)
}

/// The self-contained HTML page.
pub fn html(title: &str, spans: &[Span]) -> String {
    let lanes = lanes(spans);
    let end = spans
        .iter()
        .map(|s| s.end_s)
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let (label_w, width, row_h) = (170.0, 1100.0, 26.0);
    let plot_w = width - label_w - 20.0;
    let x = |t: f64| label_w + t / end * plot_w;
    let height = 40.0 + row_h * lanes.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    for i in 0..=10 {
        let t = end * i as f64 / 10.0;
        let xi = x(t);
        let label = tick_label(t, end / 10.0);
        svg.push_str(&format!(
            "<line x1=\"{xi:.1}\" y1=\"20\" x2=\"{xi:.1}\" y2=\"{height}\" stroke=\"#e3e6e8\"/><text x=\"{xi:.1}\" y=\"14\" text-anchor=\"middle\" fill=\"#555\">{label}</text>\n"
        ));
    }
    for (row, lane) in lanes.iter().enumerate() {
        let y = 24.0 + row_h * row as f64;
        svg.push_str(&format!(
            "<text x=\"4\" y=\"{:.1}\" fill=\"#222\">{}</text>\n",
            y + 16.0,
            escape(lane)
        ));
        for s in spans.iter().filter(|s| &s.lane == lane) {
            let (x0, x1) = (x(s.start_s), x(s.end_s));
            let w = (x1 - x0).max(1.0);
            let tip = format!("{} — {:.3} s ({})", s.label, s.end_s - s.start_s, s.status);
            svg.push_str(&format!(
                "<g><title>{}</title><rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" rx=\"3\" fill=\"{}\"/>",
                escape(&tip),
                row_h - 6.0,
                colour(&s.status)
            ));
            if w > 60.0 {
                svg.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#fff\">{}</text>",
                    x0 + 4.0,
                    y + 14.0,
                    escape(&s.label)
                ));
            }
            svg.push_str("</g>\n");
        }
    }
    svg.push_str("</svg>\n");
    let mut keys: Vec<String> = Vec::new();
    for s in spans {
        for (k, _) in &s.details {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    let mut table = String::from(
        "<table>\n<tr><th>lane</th><th>name</th><th>start s</th><th>wall s</th><th>status</th>",
    );
    for k in &keys {
        table.push_str(&format!("<th>{}</th>", escape(k)));
    }
    table.push_str("</tr>\n");
    for s in spans {
        table.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td>",
            escape(&s.lane),
            escape(&s.label),
            s.start_s,
            s.end_s - s.start_s,
            escape(&s.status)
        ));
        for k in &keys {
            let v = s
                .details
                .iter()
                .find(|(dk, _)| dk == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("");
            table.push_str(&format!("<td>{}</td>", escape(v)));
        }
        table.push_str("</tr>\n");
    }
    table.push_str("</table>\n");
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>body{{font-family:sans-serif;margin:20px;color:#222}}table{{border-collapse:collapse;margin-top:16px}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:nth-child(-n+2),th{{text-align:left}}</style></head>\n<body><h2>{t}</h2>\n<p>total {end:.3} s</p>\n{svg}{table}</body></html>\n",
        t = escape(title)
    )
}

/// Chrome trace-event JSON: one complete (`X`) event per span, one thread per lane.
pub fn chrome_trace(spans: &[Span]) -> String {
    let lanes = lanes(spans);
    let mut events = Vec::new();
    for (i, lane) in lanes.iter().enumerate() {
        events.push(json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": i + 1, "args": {"name": lane}}));
    }
    for s in spans {
        let tid = lanes.iter().position(|l| l == &s.lane).unwrap_or(0) + 1;
        let mut args = serde_json::Map::new();
        args.insert("status".into(), json!(s.status));
        for (k, v) in &s.details {
            args.insert(k.clone(), json!(v));
        }
        events.push(json!({
            "name": s.label, "cat": "nxcc", "ph": "X", "pid": 1, "tid": tid,
            "ts": (s.start_s * 1e6).round() as u64, "dur": ((s.end_s - s.start_s) * 1e6).round() as u64, "args": args,
        }));
    }
    serde_json::to_string_pretty(&json!({"traceEvents": events, "displayTimeUnit": "ms"}))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans() -> Vec<Span> {
        vec![
            Span {
                lane: "compile".into(),
                label: "HLOToTensorizer".into(),
                start_s: 0.0,
                end_s: 0.5,
                status: "ok".into(),
                details: vec![("peak RSS KB".into(), "1024".into())],
            },
            Span {
                lane: "compile".into(),
                label: "Walrus<Driver>".into(),
                start_s: 0.5,
                end_s: 2.0,
                status: "failed".into(),
                details: vec![],
            },
        ]
    }

    #[test]
    fn html_is_self_contained_and_escaped() {
        let h = html("m.pb", &spans());
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert!(h.contains("<svg") && h.contains("Walrus&lt;Driver&gt;"));
        assert!(
            !h.contains("http://") || h.matches("http://").count() == 1,
            "only the SVG namespace URI"
        );
        assert!(!h.contains("https://") && !h.contains("<script src") && !h.contains("<link"));
        assert!(h.contains("1024"));
    }

    #[test]
    fn tick_units_follow_the_span() {
        let ticks = |end: f64| -> Vec<String> {
            (0..=10)
                .map(|i| tick_label(end * i as f64 / 10.0, end / 10.0))
                .collect()
        };
        // A 10 ms compile: milliseconds, each tick its own.
        let t = ticks(0.010);
        assert_eq!(t[0], "0 ms");
        assert_eq!(t[1], "1 ms");
        assert_eq!(t[10], "10 ms");
        let t = ticks(0.0035);
        assert_eq!((t[1].as_str(), t[10].as_str()), ("0.3 ms", "3.5 ms"));
        // Seconds and minutes.
        assert_eq!(ticks(2.0)[1], "0.2 s");
        assert_eq!(ticks(30.0)[1], "3 s");
        assert_eq!(ticks(3600.0)[1], "6 min");
        for end in [0.001, 0.010, 0.37, 1.38, 45.0, 599.0, 7200.0] {
            let t = ticks(end);
            let mut d = t.clone();
            d.dedup();
            assert_eq!(d.len(), 11, "{end}: {t:?}");
        }
        // In the page.
        let h = html(
            "fast",
            &[Span {
                lane: "compile".into(),
                label: "HLOToTensorizer".into(),
                start_s: 0.0,
                end_s: 0.010,
                status: "ok".into(),
                details: vec![],
            }],
        );
        assert!(h.contains(">5 ms</text>") && !h.contains("0.00s"), "{h}");
    }

    #[test]
    fn trace_events() {
        let t: serde_json::Value = serde_json::from_str(&chrome_trace(&spans())).unwrap();
        let ev = t["traceEvents"].as_array().unwrap();
        let x: Vec<&serde_json::Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x.len(), 2);
        assert_eq!(x[1]["ts"], 500_000);
        assert_eq!(x[1]["dur"], 1_500_000);
        assert_eq!(x[1]["args"]["status"], "failed");
    }
}
