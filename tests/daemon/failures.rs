//! What the daemon makes of each kind of failure, produced for real by the simulated tools: the
//! exit status it answers, whether the cache serves the failure the next time (a failure of the
//! model) or compiles again (a kill, a timeout), and its status counters.

use serde_json::json;

use crate::common::*;

#[test]
fn each_kind_of_failure_gets_its_answer_its_cache_use_and_its_count() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let wd = world.mkdir("work");
    // (fault, extra arguments, whether the next identical request is served by the cache).
    let kinds: [(&str, &[&str], bool); 4] = [
        ("walrus_driver:exit=3", &[], true),
        ("walrus_driver:segv", &[], true),
        ("walrus_driver:kill", &[], false),
        ("walrus_driver:hang", &["--job-timeout", "1"], false),
    ];
    for (i, (fault, extra, remembered)) in kinds.iter().enumerate() {
        // A model of its own per kind, so that one kind's entry cannot answer another's.
        let m = world.path().join(format!("m{i}.hlo"));
        std::fs::write(&m, distinct_model(i)).unwrap();
        let output = format!("out{i}.neff");
        let mut argv = vec![
            m.to_str().unwrap(),
            "--target",
            "trn2",
            "--toolchain",
            "sim",
            "--output",
            &output,
        ];
        argv.extend(extra.iter());
        let caches: Vec<String> = (0..2)
            .map(|_| {
                let (r, events) = daemon.v1(&json!({
                    "argv": argv,
                    "working_directory": wd,
                    "env": {"NXCC_SIM_FAULT": fault},
                }));
                assert_eq!(r.status, 200, "{fault}");
                let done = events.last().unwrap();
                assert_eq!(done["event"], "done", "{fault}: {events:?}");
                assert_eq!(done["exit_status"], 70, "{fault}: {events:?}");
                done["cache"].as_str().unwrap().to_string()
            })
            .collect();
        let second = if *remembered { "hit" } else { "miss" };
        assert_eq!(caches, ["miss", second], "{fault}");
        assert!(!wd.join(&output).exists(), "{fault}");
    }
    let status = daemon.status();
    assert_eq!(status["compiles"]["failed"], 8, "{status}");
    assert_eq!(status["compiles"]["cancelled"], 0, "{status}");
    assert_eq!(status["cache"]["hits"], 2, "{status}");
    assert_eq!(
        status["cache"]["counters"]["failures_served"], 2,
        "{status}"
    );
    assert_eq!(
        status["cache"]["counters"]["compile_failures"], 6,
        "{status}"
    );
}
