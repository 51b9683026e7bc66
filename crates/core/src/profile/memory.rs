//! The memory in use over a run, sampled where it changes: the estimates of the compiles admitted
//! at the time (what admission holds against the budget) and the measured RSS — each job's peak
//! held over the job's run (a compile that ran no job of nxcc's: its own peak over its run), the
//! measured upper envelope of what was resident.

use super::Run;

/// The memory in use from `t_s` until the next sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds from the start of the run.
    pub t_s: f64,
    /// The estimates of the compiles running, bytes.
    pub admitted: u64,
    /// The peak RSS of the jobs running, bytes.
    pub rss: u64,
}

/// One change: at `t`, `admitted` and `rss` bytes start (`+`) or stop (`-`) being in use.
struct Change {
    t: f64,
    start: bool,
    admitted: u64,
    rss: u64,
}

fn changes(run: &Run) -> Vec<Change> {
    let mut v = Vec::new();
    let mut interval = |a: f64, b: f64, admitted: u64, rss: u64| {
        if admitted == 0 && rss == 0 {
            return;
        }
        let b = b.max(a);
        v.push(Change {
            t: a,
            start: true,
            admitted,
            rss,
        });
        v.push(Change {
            t: b,
            start: false,
            admitted,
            rss,
        });
    };
    for c in &run.compiles {
        interval(c.start_s, c.end_s, c.estimate.unwrap_or(0), 0);
        if c.phases.is_empty() {
            let rss = c.peak_rss_kb.unwrap_or(0).saturating_mul(1024);
            interval(c.start_s, c.end_s, 0, rss);
        }
        for p in &c.phases {
            interval(p.start_s, p.end_s, 0, p.peak_rss_kb.saturating_mul(1024));
        }
    }
    // In time order; at one moment what ends goes before what starts (a slot handed from one
    // compile to the next holds one of them).
    v.sort_by(|a, b| a.t.total_cmp(&b.t).then(a.start.cmp(&b.start)));
    v
}

/// The samples: one at 0, then one at every moment the memory in use changes.
pub fn series(run: &Run) -> Vec<Sample> {
    let mut out = vec![Sample {
        t_s: 0.0,
        admitted: 0,
        rss: 0,
    }];
    let (mut admitted, mut rss) = (0u64, 0u64);
    let all = changes(run);
    for (i, ch) in all.iter().enumerate() {
        if ch.start {
            admitted = admitted.saturating_add(ch.admitted);
            rss = rss.saturating_add(ch.rss);
        } else {
            admitted = admitted.saturating_sub(ch.admitted);
            rss = rss.saturating_sub(ch.rss);
        }
        // A sample once every change of this moment is counted, when it changed anything.
        if all.get(i + 1).is_some_and(|next| next.t == ch.t) {
            continue;
        }
        let last = out.last_mut().expect("one sample at least");
        if (last.admitted, last.rss) == (admitted, rss) {
            continue;
        }
        if last.t_s == ch.t {
            (last.admitted, last.rss) = (admitted, rss);
        } else {
            out.push(Sample {
                t_s: ch.t,
                admitted,
                rss,
            });
        }
    }
    out
}

/// The most of each measure in use at once: (admitted, rss), bytes.
pub(crate) fn peaks(samples: &[Sample]) -> (u64, u64) {
    samples
        .iter()
        .fold((0, 0), |(a, r), s| (a.max(s.admitted), r.max(s.rss)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;

    #[test]
    fn memory_follows_the_bars_and_their_jobs() {
        let s = series(&run());
        let mib = |b: u64| b >> 20;
        let at = |t: f64| {
            let x = s.iter().rev().find(|x| x.t_s <= t).unwrap();
            (mib(x.admitted), mib(x.rss))
        };
        // a (300 MiB, 100 MiB RSS) and b (300 MiB; its jobs 50 then 120 MiB).
        assert_eq!(at(0.0), (600, 100));
        assert_eq!(at(0.2), (600, 150));
        assert_eq!(at(0.7), (600, 220));
        // a ends at 1.0 as c starts: never both.
        assert_eq!(at(1.0), (600, 220));
        assert_eq!(at(1.1), (600, 220));
        assert_eq!(at(1.5), (300, 120));
        // b's bar ends at 2.0; its last job was measured past it.
        assert_eq!(at(2.2), (0, 120));
        assert_eq!(at(3.0), (0, 0));
        assert_eq!(peaks(&s), (600 << 20, 220 << 20));
        // Every sample is a change.
        for w in s.windows(2) {
            assert!(w[0].t_s < w[1].t_s);
            assert_ne!((w[0].admitted, w[0].rss), (w[1].admitted, w[1].rss));
        }
    }
}
