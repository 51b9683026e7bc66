//! A [`Run`] as one self-contained HTML page (`--timings`): no network, no external script,
//! style or font. First a summary line, then a timeline — one lane per slot, every compile a bar
//! coloured by its outcome (`data-graph`, `data-outcome`), its jobs as a strip inside it —, the
//! memory in use on the same time axis (the admitted estimates, `data-series="memory"`, and the
//! measured RSS, `data-series="rss"`, against the budget line, `data-series="budget"`), and
//! tables: the slowest compiles, the failures grouped by code, the hits by cache tier, every
//! compile. Every graph named in a table links to its bar; the legend filters the bars.

use std::fmt::Write as _;

use super::memory::{self, Sample};
use super::{Compile, Outcome, Run, OUTCOMES};
use crate::words::count;

/// Drawing sizes, pixels.
const WIDTH: f64 = 1200.0;
const LABEL_W: f64 = 90.0;
const ROW_H: f64 = 30.0;
const AXIS_H: f64 = 24.0;
const MEMORY_H: f64 = 170.0;
/// Rows in the table of the slowest compiles.
const SLOWEST: usize = 10;

/// Text made safe for HTML (content and attribute values).
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// The colour of an outcome's bars.
pub fn colour(outcome: &str) -> &'static str {
    match outcome {
        "compiled" => "#3d8b5f",
        "hit" => "#4a78c2",
        "failed" => "#c8453d",
        "remembered" => "#8a3d8f",
        "cancelled" => "#d9a441",
        "no-neff" => "#a0826d",
        _ => "#9aa4ad",
    }
}

/// Bytes for a person: `812 MiB`, `1.6 GiB`.
pub fn size(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else if mib >= 10.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

/// A tick at `t` seconds, ticks `step` seconds apart: in ms below a second of ticks, in s below
/// ten minutes, else in min, with as many decimals as tell neighbouring ticks apart.
pub(crate) fn tick_label(t: f64, step: f64) -> String {
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

/// The time axis both charts share.
struct Axis {
    end: f64,
}

impl Axis {
    fn x(&self, t: f64) -> f64 {
        LABEL_W + t.clamp(0.0, self.end) / self.end * (WIDTH - LABEL_W - 20.0)
    }

    /// Grid lines and tick labels from `top` to `bottom`, at a round step.
    fn grid(&self, top: f64, bottom: f64) -> String {
        let step = round_step(self.end / 8.0);
        let mut s = String::new();
        let mut k = 0u32;
        while f64::from(k) * step <= self.end * (1.0 + 1e-9) {
            let t = f64::from(k) * step;
            let x = self.x(t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" class=\"grid\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tick\">{}</text>",
                top - 6.0,
                tick_label(t, step)
            );
            k += 1;
        }
        s
    }
}

/// The round step (1, 2 or 5 times a power of ten) nearest above `raw` seconds.
pub(crate) fn round_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// A bar's label: the graph, and which retry it is.
fn label(c: &Compile) -> String {
    match c.attempt {
        0 => c.graph.clone(),
        n => format!("{} (retry {n})", c.graph),
    }
}

/// What a bar's tooltip says.
fn tooltip(c: &Compile) -> String {
    let mut t = format!(
        "{} — {} in {:.3} s",
        label(c),
        outcome_words(&c.outcome),
        c.end_s - c.start_s
    );
    if let Some(kb) = c.peak_rss_kb {
        let _ = write!(t, "; peak RSS {}", size(kb.saturating_mul(1024)));
    }
    if let Some(e) = c.estimate {
        let _ = write!(t, "; estimate {}", size(e));
    }
    if let Some(e) = &c.error {
        let _ = write!(t, "\n{e}");
    }
    t
}

/// An outcome in words: `hit (local)`, `failed: NCC_EDRV082`.
fn outcome_words(o: &Outcome) -> String {
    match o {
        Outcome::Hit { tier } => format!("hit ({tier})"),
        Outcome::Failed { .. } | Outcome::Remembered { .. } => format!(
            "{}: {}",
            if matches!(o, Outcome::Failed { .. }) {
                "failed"
            } else {
                "remembered failure"
            },
            o.failure_group().unwrap_or_default()
        ),
        _ => o.name().to_string(),
    }
}

/// One bar, with its jobs as a strip along its bottom.
fn bar(i: usize, c: &Compile, axis: &Axis, y: f64) -> String {
    let (x0, x1) = (axis.x(c.start_s), axis.x(c.end_s));
    let w = (x1 - x0).max(4.0);
    let h = ROW_H - 8.0;
    let mut s = format!(
        "<g class=\"bar\" id=\"bar-{i}\" data-graph=\"{}\" data-outcome=\"{}\"><title>{}</title><rect class=\"main\" x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" rx=\"3\" fill=\"{}\"/>",
        escape(&c.graph),
        c.outcome.name(),
        escape(&tooltip(c)),
        colour(c.outcome.name())
    );
    for (k, p) in c.phases.iter().enumerate() {
        let px0 = axis.x(p.start_s.max(c.start_s));
        let px1 = axis.x(p.end_s.min(c.end_s)).max(px0);
        let shade = if k % 2 == 0 { "#0000004d" } else { "#ffffff59" };
        let _ = write!(
            s,
            "<rect class=\"phase\" x=\"{px0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"5\" fill=\"{shade}\"><title>{}</title></rect>",
            y + h - 5.0,
            (px1 - px0).max(0.5),
            escape(&format!(
                "{} — {:.3} s, {}, peak RSS {}",
                p.name,
                p.end_s - p.start_s,
                p.status,
                size(p.peak_rss_kb.saturating_mul(1024))
            ))
        );
    }
    let chars = ((w - 8.0) / 7.0) as usize;
    if chars >= 3 {
        let text: String = label(c).chars().take(chars).collect();
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\">{}</text>",
            x0 + 4.0,
            y + 14.0,
            escape(&text)
        );
    }
    s.push_str("</g>\n");
    s
}

/// The timeline: a lane per slot, a bar per compile.
fn timeline(run: &Run, axis: &Axis) -> String {
    let lanes = run
        .compiles
        .iter()
        .map(|c| c.slot + 1)
        .max()
        .unwrap_or(0)
        .max(run.lanes.len())
        .max(1);
    let height = AXIS_H + ROW_H * lanes as f64 + 4.0;
    let mut s = format!(
        "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"compiles over time\">\n"
    );
    s.push_str(&axis.grid(AXIS_H, height));
    for lane in 0..lanes {
        let y = AXIS_H + ROW_H * lane as f64;
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{:.1}\" class=\"lane\">{}</text>",
            y + 15.0,
            escape(&run.lane(lane))
        );
    }
    for (i, c) in run.compiles.iter().enumerate() {
        s.push_str(&bar(i, c, axis, AXIS_H + ROW_H * c.slot as f64 + 2.0));
    }
    s.push_str("</svg>\n");
    s
}

/// A step path through the samples of one measure (`None`: the area under it, closed).
fn step_path(
    samples: &[Sample],
    axis: &Axis,
    y: &dyn Fn(u64) -> f64,
    of: fn(&Sample) -> u64,
    area: bool,
) -> String {
    let base = y(0);
    let mut d = format!("M{:.1},{:.1}", axis.x(0.0), if area { base } else { y(0) });
    for s in samples {
        let _ = write!(d, " H{:.1} V{:.1}", axis.x(s.t_s), y(of(s)));
    }
    let _ = write!(d, " H{:.1}", axis.x(axis.end));
    if area {
        let _ = write!(d, " V{base:.1} Z");
    }
    d
}

/// The memory chart: admitted estimates (an area), measured RSS (a line), the budget (a line).
fn memory_chart(run: &Run, samples: &[Sample], axis: &Axis) -> String {
    let (admitted, rss) = memory::peaks(samples);
    let top = admitted.max(rss).max(run.budget.unwrap_or(0)).max(1 << 20) as f64 * 1.12;
    let (y0, y1) = (AXIS_H, AXIS_H + MEMORY_H);
    let y = |b: u64| y1 - b as f64 / top * (y1 - y0);
    let height = y1 + 6.0;
    let mut s = format!(
        "<svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"memory in use over time\">\n"
    );
    s.push_str(&axis.grid(y0, y1));
    for frac in [0.0, 0.5, 1.0] {
        let b = (top / 1.12 * frac) as u64;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{}</text>",
            LABEL_W - 6.0,
            y(b) + 4.0,
            size(b)
        );
    }
    let _ = writeln!(
        s,
        "<path data-series=\"memory\" class=\"admitted\" d=\"{}\"><title>estimates of the compiles admitted</title></path>",
        step_path(samples, axis, &y, |s| s.admitted, true)
    );
    let _ = writeln!(
        s,
        "<path data-series=\"rss\" class=\"rss\" d=\"{}\"><title>measured peak RSS of the jobs running</title></path>",
        step_path(samples, axis, &y, |s| s.rss, false)
    );
    if let Some(b) = run.budget {
        let yb = y(b);
        let _ = writeln!(
            s,
            "<line data-series=\"budget\" class=\"budget\" x1=\"{LABEL_W:.1}\" y1=\"{yb:.1}\" x2=\"{:.1}\" y2=\"{yb:.1}\"><title>budget {}</title></line><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"budget-label\">budget {}</text>",
            WIDTH - 20.0,
            size(b),
            WIDTH - 22.0,
            yb - 4.0,
            size(b)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The line a person reads first.
pub fn summary(run: &Run, samples: &[Sample]) -> String {
    let finals = run.finals();
    let n = |name: &str| finals.iter().filter(|c| c.outcome.name() == name).count();
    let mut parts = vec![format!("{} compiled", n("compiled"))];
    let mut tiers: Vec<(String, usize)> = Vec::new();
    for c in &finals {
        if let Outcome::Hit { tier } = &c.outcome {
            match tiers.iter_mut().find(|(t, _)| t == tier) {
                Some((_, k)) => *k += 1,
                None => tiers.push((tier.clone(), 1)),
            }
        }
    }
    let tiers: Vec<String> = tiers.iter().map(|(t, k)| format!("{k} {t}")).collect();
    parts.push(match tiers.is_empty() {
        true => "0 hits".to_string(),
        false => format!("{} ({})", count(n("hit"), "hit", "hits"), tiers.join(", ")),
    });
    parts.push(format!("{} failed", n("failed")));
    for (name, one, many) in [
        ("remembered", "remembered failure", "remembered failures"),
        ("cancelled", "cancelled", "cancelled"),
        ("skipped", "skipped", "skipped"),
        ("no-neff", "wrote no NEFF", "wrote no NEFF"),
    ] {
        if n(name) > 0 {
            parts.push(count(n(name), one, many));
        }
    }
    let (admitted, rss) = memory::peaks(samples);
    let budget = run
        .budget
        .map(|b| format!(" of a {} budget", size(b)))
        .unwrap_or_default();
    let slowest = finals
        .iter()
        .max_by(|a, b| (a.end_s - a.start_s).total_cmp(&(b.end_s - b.start_s)))
        .map(|c| format!("; slowest: {} ({:.2} s)", c.graph, c.end_s - c.start_s))
        .unwrap_or_default();
    format!(
        "{} in {:.2} s: {}; memory: at most {} admitted and {} measured{budget}{slowest}.",
        count(finals.len(), "compile", "compiles"),
        run.makespan_s(),
        parts.join(", "),
        size(admitted),
        size(rss)
    )
}

/// A link to a bar.
fn link(i: usize, c: &Compile) -> String {
    format!("<a href=\"#bar-{i}\">{}</a>", escape(&label(c)))
}

/// The slowest bars.
fn slowest_table(run: &Run) -> String {
    let mut v: Vec<(usize, &Compile)> = run.compiles.iter().enumerate().collect();
    v.sort_by(|a, b| (b.1.end_s - b.1.start_s).total_cmp(&(a.1.end_s - a.1.start_s)));
    let mut t = String::from("<table><tr><th>graph</th><th>outcome</th><th>wall s</th><th>peak RSS</th><th>estimate</th><th>lane</th></tr>\n");
    for (i, c) in v.into_iter().take(SLOWEST) {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            link(i, c),
            escape(&outcome_words(&c.outcome)),
            c.end_s - c.start_s,
            c.peak_rss_kb.map(|k| size(k.saturating_mul(1024))).unwrap_or_else(|| "-".into()),
            c.estimate.map(size).unwrap_or_else(|| "-".into()),
            escape(&run.lane(c.slot))
        );
    }
    t.push_str("</table>\n");
    t
}

/// The final failures, grouped by code.
fn failures_table(run: &Run) -> String {
    let mut groups: Vec<(String, Vec<(usize, &Compile)>)> = Vec::new();
    let finals = run.finals();
    for (i, c) in run.compiles.iter().enumerate() {
        let Some(g) = c.outcome.failure_group() else {
            continue;
        };
        if !finals.iter().any(|f| std::ptr::eq(*f, c)) {
            continue;
        }
        match groups.iter_mut().find(|(k, _)| *k == g) {
            Some((_, v)) => v.push((i, c)),
            None => groups.push((g, vec![(i, c)])),
        }
    }
    if groups.is_empty() {
        return "<p class=\"none\">No compile failed.</p>\n".into();
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let mut t = String::from("<table><tr><th>code</th><th>compiles</th><th>graphs</th><th>first error</th><th>reproducers</th></tr>\n");
    for (code, v) in groups {
        let graphs: Vec<String> = v.iter().map(|(i, c)| link(*i, c)).collect();
        let first = v
            .iter()
            .find_map(|(_, c)| c.error.clone())
            .unwrap_or_default();
        let bundles: Vec<String> = v
            .iter()
            .filter_map(|(_, c)| c.reproducer.as_ref())
            .map(|r| {
                let name = r.rsplit('/').next().unwrap_or(r);
                format!("<a href=\"{}\">{}</a>", escape(r), escape(name))
            })
            .collect();
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"err\">{}</td><td>{}</td></tr>",
            escape(&code),
            v.len(),
            graphs.join(", "),
            escape(&first),
            bundles.join("<br>")
        );
    }
    t.push_str("</table>\n");
    t
}

/// The final hits, by the cache tier that served them.
fn hits_table(run: &Run) -> String {
    let finals = run.finals();
    let mut tiers: Vec<(String, Vec<(usize, &Compile)>)> = Vec::new();
    for (i, c) in run.compiles.iter().enumerate() {
        let Outcome::Hit { tier } = &c.outcome else {
            continue;
        };
        if !finals.iter().any(|f| std::ptr::eq(*f, c)) {
            continue;
        }
        match tiers.iter_mut().find(|(k, _)| k == tier) {
            Some((_, v)) => v.push((i, c)),
            None => tiers.push((tier.clone(), vec![(i, c)])),
        }
    }
    if tiers.is_empty() {
        return "<p class=\"none\">No compile was a cache hit.</p>\n".into();
    }
    let mut t = String::from("<table><tr><th>tier</th><th>hits</th><th>graphs</th></tr>\n");
    for (tier, v) in tiers {
        let graphs: Vec<String> = v.iter().map(|(i, c)| link(*i, c)).collect();
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            escape(&tier),
            v.len(),
            graphs.join(", ")
        );
    }
    t.push_str("</table>\n");
    t
}

/// Every bar, in time order.
fn every_table(run: &Run) -> String {
    let mut v: Vec<(usize, &Compile)> = run.compiles.iter().enumerate().collect();
    v.sort_by(|a, b| a.1.start_s.total_cmp(&b.1.start_s));
    let mut t = format!(
        "<details><summary>{}</summary><table><tr><th>graph</th><th>outcome</th><th>start s</th><th>wall s</th><th>peak RSS</th><th>estimate</th><th>from</th><th>cache key</th><th>log</th></tr>\n",
        count(v.len(), "bar", "bars")
    );
    for (i, c) in v {
        let _ = writeln!(
            t,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.3}</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"key\">{}</td><td>{}</td></tr>",
            link(i, c),
            escape(&outcome_words(&c.outcome)),
            c.start_s,
            c.end_s - c.start_s,
            c.peak_rss_kb.map(|k| size(k.saturating_mul(1024))).unwrap_or_else(|| "-".into()),
            c.estimate.map(size).unwrap_or_else(|| "-".into()),
            escape(c.basis.as_deref().unwrap_or("-")),
            escape(c.key.as_deref().map(|k| &k[..k.len().min(16)]).unwrap_or("-")),
            escape(c.log.as_deref().unwrap_or(""))
        );
    }
    t.push_str("</table></details>\n");
    t
}

/// The legend: one button per outcome present (filters the bars), and one for all.
fn legend(run: &Run) -> String {
    let mut s = String::from("<nav class=\"legend\">");
    for name in OUTCOMES {
        let n = run
            .compiles
            .iter()
            .filter(|c| c.outcome.name() == name)
            .count();
        if n > 0 {
            let _ = write!(
                s,
                "<button type=\"button\" data-filter=\"{name}\"><span class=\"swatch\" style=\"background:{}\"></span>{name} ({n})</button>",
                colour(name)
            );
        }
    }
    s.push_str("<button type=\"button\" data-filter=\"\">all</button></nav>\n");
    s
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:20px 24px;color:#1f2328;background:#fff}\
h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin:22px 0 6px}\
.summary{font-size:15px;background:#f3f5f7;border-left:4px solid #4a78c2;padding:8px 12px;margin:8px 0 12px}\
.legend button{font:inherit;margin:0 6px 6px 0;padding:2px 8px;border:1px solid #c9ced4;border-radius:4px;background:#fff;cursor:pointer}\
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}\
svg{display:block;max-width:100%;height:auto;font:12px system-ui,sans-serif}\
.grid{stroke:#e6e9ec}.tick{fill:#57606a}.lane{fill:#1f2328}.label{fill:#fff;pointer-events:none}\
.bar.dim{opacity:.15}.bar:target rect.main{stroke:#111;stroke-width:2.5}\
.admitted{fill:#4a78c233;stroke:#4a78c2;stroke-width:1.5}.rss{fill:none;stroke:#3d8b5f;stroke-width:1.5}\
.budget{stroke:#c8453d;stroke-width:1.5;stroke-dasharray:6 4}.budget-label{fill:#c8453d}\
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}td.err,td.key{font-family:ui-monospace,monospace;font-size:12px}\
.none{color:#57606a}.key-legend span{margin-right:14px}";

const SCRIPT: &str = "document.querySelectorAll('.legend button').forEach(function(b){\
b.addEventListener('click',function(){var f=b.getAttribute('data-filter');\
document.querySelectorAll('#timeline .bar').forEach(function(g){\
g.classList.toggle('dim',f!==''&&g.getAttribute('data-outcome')!==f);});});});";

/// The page.
pub fn html(run: &Run) -> String {
    let axis = Axis {
        end: run.makespan_s(),
    };
    let samples = memory::series(run);
    let mut body = format!(
        "<h1>{}</h1>\n<p class=\"summary\" id=\"summary\">{}</p>\n",
        escape(&run.title),
        escape(&summary(run, &samples))
    );
    body.push_str(&legend(run));
    body.push_str("<h2>Compiles</h2>\n");
    body.push_str(&timeline(run, &axis));
    body.push_str("<h2>Memory in use</h2>\n<p class=\"key-legend\"><span style=\"color:#4a78c2\">■ estimates of the compiles admitted</span><span style=\"color:#3d8b5f\">— measured peak RSS of the jobs running</span>");
    if run.budget.is_some() {
        body.push_str("<span style=\"color:#c8453d\">- - the memory budget</span>");
    }
    body.push_str("</p>\n");
    body.push_str(&memory_chart(run, &samples, &axis));
    for (id, title, table) in [
        ("slowest", "Slowest compiles", slowest_table(run)),
        ("failures", "Failures by code", failures_table(run)),
        ("hits", "Hits by cache tier", hits_table(run)),
        ("every", "Every compile", every_table(run)),
    ] {
        let _ = write!(
            body,
            "<section id=\"{id}\"><h2>{title}</h2>\n{table}</section>\n"
        );
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{STYLE}</style></head>\n<body>\n{body}<script>{SCRIPT}</script>\n</body></html>\n",
        escape(&run.title)
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;

    #[test]
    fn the_page_is_self_contained_with_what_a_person_looks_for() {
        let h = html(&run());
        assert!(h.starts_with("<!DOCTYPE html>"));
        // Only the SVG namespace names a URL; nothing is fetched.
        assert_eq!(
            h.matches("http").count(),
            h.matches("http://www.w3.org/2000/svg").count()
        );
        assert!(
            !h.contains("<script src")
                && !h.contains("<link")
                && !h.contains("@import")
                && !h.contains("url(")
        );
        for needle in [
            "data-graph=\"a\" data-outcome=\"compiled\"",
            "data-graph=\"b&lt;&amp;&quot;x\" data-outcome=\"failed\"",
            "data-graph=\"c\" data-outcome=\"hit\"",
            "data-series=\"memory\"",
            "data-series=\"budget\"",
            "<a href=\"#bar-1\">b&lt;&amp;&quot;x</a>",
            "<td>NCC_EDVR003</td>",
            "<a href=\"/o/nxcc-reproducer-abc.tar.gz\">nxcc-reproducer-abc.tar.gz</a>",
            "<td>local</td>",
        ] {
            assert!(h.contains(needle), "{needle} not in the page");
        }
        let s = summary(&run(), &memory::series(&run()));
        assert_eq!(
            s,
            "3 compiles in 2.00 s: 1 compiled, 1 hit (1 local), 1 failed; memory: at most 600 MiB admitted and 220 MiB measured of a 700 MiB budget; slowest: b<&\"x (2.00 s)."
        );
        // The summary comes first, before the charts.
        assert!(h.find("id=\"summary\"").unwrap() < h.find("<svg").unwrap());
    }

    #[test]
    fn tick_units_follow_the_span() {
        let ticks = |end: f64| -> Vec<String> {
            (0..=10)
                .map(|i| tick_label(end * i as f64 / 10.0, end / 10.0))
                .collect()
        };
        let t = ticks(0.010);
        assert_eq!(
            (t[0].as_str(), t[1].as_str(), t[10].as_str()),
            ("0 ms", "1 ms", "10 ms")
        );
        let t = ticks(0.0035);
        assert_eq!((t[1].as_str(), t[10].as_str()), ("0.3 ms", "3.5 ms"));
        assert_eq!(ticks(2.0)[1], "0.2 s");
        assert_eq!(ticks(30.0)[1], "3 s");
        assert_eq!(ticks(3600.0)[1], "6 min");
        assert_eq!(round_step(12.38 / 8.0), 2.0);
        assert_eq!(round_step(0.9), 1.0);
        assert_eq!(round_step(0.003), 0.005);
        assert_eq!(round_step(400.0), 500.0);
        for end in [0.001, 0.010, 0.37, 1.38, 45.0, 599.0, 7200.0] {
            let t = ticks(end);
            let mut d = t.clone();
            d.dedup();
            assert_eq!(d.len(), 11, "{end}: {t:?}");
        }
    }

    #[test]
    fn failures_are_grouped_by_code_and_only_final_ones_count() {
        let mut r = run();
        let mut again = super::super::tests::bar("b<&\"x", 0, 2.0, 2.5, Outcome::Compiled);
        again.attempt = 1;
        r.compiles.push(again);
        let h = html(&r);
        assert!(
            h.contains("No compile failed."),
            "a retried failure is not final"
        );
        assert!(h.contains("b&lt;&amp;&quot;x (retry 1)"));
    }
}
