//! Plan building in process: parse + buildPipeline for the longest command line of the client
//! corpus, and for the default flow. Target: ≤ 50 µs per plan (see BENCHMARKS.md).

use criterion::{criterion_group, criterion_main, Criterion};
use nxcc::plan::{self, Invocation, StaticProbe};
use std::hint::black_box;

fn longest_corpus_line() -> Vec<String> {
    let text = include_str!("../tests/data/client-command-lines.txt");
    let line = text
        .lines()
        .filter(|l| l.starts_with("0\t"))
        .map(|l| l.split('\t').nth(1).unwrap())
        .max_by_key(|l| l.len())
        .unwrap();
    shell_words::split(line).unwrap()
}

fn plan_once(argv: &[String], probe: &StaticProbe) -> usize {
    Invocation::from_argv("nxcc", argv, probe)
        .unwrap()
        .plan
        .jobs
        .len()
}

fn bench(c: &mut Criterion) {
    let probe = StaticProbe::new("/launch");
    let longest = longest_corpus_line();
    let default: Vec<String> = ["compile", "m.pb", "--target", "trn2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    c.bench_function("plan: longest corpus command line", |b| {
        b.iter(|| plan_once(black_box(&longest), &probe))
    });
    c.bench_function("plan: compile m.pb --target trn2", |b| {
        b.iter(|| plan_once(black_box(&default), &probe))
    });
    let built = Invocation::from_argv("nxcc", &longest, &probe).unwrap();
    c.bench_function("dry-run JSON rendering", |b| {
        b.iter(|| {
            serde_json::to_string(&plan::dryrun::to_json(black_box(&built)))
                .unwrap()
                .len()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
