//! A [`Run`] as a Chrome trace (the Trace Event Format's JSON object form, which Perfetto's UI
//! and `chrome://tracing` open as is): process and thread names as metadata events (`M`), one
//! complete event (`X`) per compile on its slot's thread, named by its graph, with its outcome,
//! peak RSS, estimate and cache key in `args`; its jobs as complete events nested inside it on
//! the same thread; and a `memory` counter (`C`) sampled where the memory in use changes, whose
//! `args` are the admitted estimates, the measured RSS and the budget, bytes. Times are whole
//! microseconds from the start of the run.

use serde_json::{json, Map, Value};

use super::memory;
use super::{Compile, Outcome, Run};

/// The process id every event carries: this process's own (the one that ran the compiles), unless
/// it is one of the slots' thread ids (a process numbered low in its own pid namespace) — Perfetto
/// takes a thread whose id is its process's for the main thread — then the id after the last slot.
fn pid(lanes: usize) -> u64 {
    let own = u64::from(std::process::id());
    if own > lanes as u64 {
        own
    } else {
        lanes as u64 + 1
    }
}

fn micros(s: f64) -> u64 {
    (s.max(0.0) * 1e6).round() as u64
}

/// The `args` of a compile's event.
fn compile_args(c: &Compile) -> Map<String, Value> {
    let mut a = Map::new();
    a.insert("input".into(), json!(c.input));
    a.insert("outcome".into(), json!(c.outcome.name()));
    match &c.outcome {
        Outcome::Hit { tier } => {
            a.insert("tier".into(), json!(tier));
        }
        Outcome::Failed { code, signal, what } => {
            a.insert("code".into(), json!(code));
            a.insert("signal".into(), json!(signal));
            a.insert("what".into(), json!(what));
        }
        Outcome::Remembered { code, what } => {
            a.insert("code".into(), json!(code));
            a.insert("what".into(), json!(what));
        }
        _ => {}
    }
    a.insert("attempt".into(), json!(c.attempt));
    a.insert("peak_rss_kb".into(), json!(c.peak_rss_kb));
    a.insert("estimate_bytes".into(), json!(c.estimate));
    a.insert("estimate_from".into(), json!(c.basis));
    a.insert("cache_key".into(), json!(c.key));
    if let Some(e) = &c.error {
        a.insert("error".into(), json!(e));
    }
    if let Some(r) = &c.reproducer {
        a.insert("reproducer".into(), json!(r));
    }
    a
}

/// The events of one compile: its own, then its jobs', each kept inside it (a job measured past
/// the compile's end is cut at it).
fn compile_events(c: &Compile, pid: u64, out: &mut Vec<Value>) {
    let tid = c.slot as u64 + 1;
    let (ts, end) = (micros(c.start_s), micros(c.end_s).max(micros(c.start_s)));
    out.push(json!({
        "name": c.graph, "cat": "compile", "ph": "X", "pid": pid, "tid": tid,
        "ts": ts, "dur": end - ts, "args": compile_args(c),
    }));
    for p in &c.phases {
        let s = micros(p.start_s).clamp(ts, end);
        let e = micros(p.end_s).clamp(s, end);
        out.push(json!({
            "name": p.name, "cat": "job", "ph": "X", "pid": pid, "tid": tid,
            "ts": s, "dur": e - s,
            "args": {"status": p.status, "peak_rss_kb": p.peak_rss_kb},
        }));
    }
}

/// The trace's JSON.
pub(crate) fn chrome_trace(run: &Run) -> Value {
    let lanes = run
        .compiles
        .iter()
        .map(|c| c.slot + 1)
        .max()
        .unwrap_or(0)
        .max(run.lanes.len());
    let pid = pid(lanes);
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
        "args": {"name": run.process},
    })];
    for slot in 0..lanes {
        let tid = slot as u64 + 1;
        events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": run.lane(slot)}}));
        events.push(json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
    }
    for s in memory::series(run) {
        let mut args = Map::new();
        args.insert("admitted".into(), json!(s.admitted));
        args.insert("rss".into(), json!(s.rss));
        if let Some(b) = run.budget {
            args.insert("budget".into(), json!(b));
        }
        events.push(json!({"name": "memory", "ph": "C", "pid": pid, "tid": 0, "ts": micros(s.t_s), "args": args}));
    }
    let mut compiles: Vec<&Compile> = run.compiles.iter().collect();
    compiles.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.slot.cmp(&b.slot)));
    for c in compiles {
        compile_events(c, pid, &mut events);
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"producer": concat!("nxcc ", env!("CARGO_PKG_VERSION")), "title": run.title},
    })
}

/// The trace's text (pretty JSON, ending in a newline).
pub fn text(run: &Run) -> String {
    let mut s = serde_json::to_string_pretty(&chrome_trace(run)).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;

    #[test]
    fn the_process_id_is_never_a_slots_thread_id() {
        let own = u64::from(std::process::id());
        assert_eq!(pid(0), own);
        assert_eq!(pid(own as usize - 1), own);
        assert_eq!(pid(own as usize), own + 1);
        assert_eq!(pid(own as usize + 5), own + 6);
    }

    #[test]
    fn one_event_per_compile_with_its_jobs_inside() {
        let t = chrome_trace(&run());
        let ev = t["traceEvents"].as_array().unwrap();
        let compiles: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "compile").collect();
        assert_eq!(compiles.len(), 3);
        assert!(compiles.iter().all(|e| e["ph"] == "X"));
        let b = compiles.iter().find(|e| e["name"] == "b<&\"x").unwrap();
        assert_eq!(b["tid"], 2);
        assert_eq!(b["args"]["outcome"], "failed");
        assert_eq!(b["args"]["code"], "NCC_EDVR003");
        assert_eq!(b["args"]["reproducer"], "/o/nxcc-reproducer-abc.tar.gz");
        let c = compiles.iter().find(|e| e["name"] == "c").unwrap();
        assert_eq!(
            (c["args"]["outcome"].as_str(), c["args"]["tier"].as_str()),
            (Some("hit"), Some("local"))
        );
        assert_eq!(
            (c["ts"].as_u64(), c["dur"].as_u64()),
            (Some(1_000_000), Some(200_000))
        );
        // The jobs are inside the compile, the last cut at its end.
        let jobs: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "job").collect();
        assert_eq!(jobs.len(), 2);
        for j in &jobs {
            assert_eq!(j["tid"], 2);
            let (s, d) = (j["ts"].as_u64().unwrap(), j["dur"].as_u64().unwrap());
            assert!(s >= b["ts"].as_u64().unwrap());
            assert!(s + d <= b["ts"].as_u64().unwrap() + b["dur"].as_u64().unwrap());
        }
        assert_eq!(jobs[1]["dur"], 1_500_000);
        // Names of the process and of both lanes.
        let names: Vec<&str> = ev
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["slot 1", "slot 2"]);
        // The memory counter, with the budget.
        let mem: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "C").collect();
        assert!(mem.iter().all(|e| e["name"] == "memory"));
        assert!(mem.iter().all(|e| e["args"]["budget"] == 700u64 << 20));
        assert_eq!(
            mem.iter()
                .map(|e| e["args"]["admitted"].as_u64().unwrap())
                .max(),
            Some(600 << 20)
        );
        // One process, whose id is no slot's thread id.
        let pids: std::collections::BTreeSet<u64> =
            ev.iter().map(|e| e["pid"].as_u64().unwrap()).collect();
        assert_eq!(pids.len(), 1);
        assert!(!ev
            .iter()
            .any(|e| e["name"] == "thread_name" && e["tid"] == e["pid"]));
        // It parses back from its text.
        let back: Value = serde_json::from_str(&text(&run())).unwrap();
        assert_eq!(back, t);
    }
}
