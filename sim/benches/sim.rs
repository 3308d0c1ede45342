//! Criterion benchmark of the simulator.
//!
//! Run it with
//!
//! ```text
//! cargo bench -p tenure-sim --bench sim
//! ```
//!
//! - `simulation/members=10,partitions=100`: `sim::run` of 10 members over
//!   topics `a` and `b` (50 partitions each) with 10 s of chaos, faults and
//!   churn, one fixed seed. Its throughput is simulated milliseconds, so the
//!   `thrpt` line reads "simulated ms per wall second". After the criterion
//!   groups a plain line `sim_seconds_per_wall_second=X members=10
//!   partitions=100` gives the same rate from a few timed runs over several
//!   seeds (skipped in `--test`/`--list` mode and when a filter excludes
//!   `simulation`). Every simulated run must be free of violations, or the
//!   benchmark panics naming the seed: a broken run's speed means nothing.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use tenure_sim::{SimConfig, SimReport};

/// The seed of the benchmarked simulation, and those of the timed runs
/// behind the `sim_seconds_per_wall_second` line.
const SIM_SEED: u64 = 1;
const SIM_RATE_SEEDS: [u64; 3] = [1, 2, 3];

fn sim_config(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(seed);
    config.members = 10;
    config.topics = vec![("a".to_owned(), 50), ("b".to_owned(), 50)];
    config.chaos = Duration::from_secs(10);
    config.faults = true;
    config.churn = true;
    config
}

/// Runs one simulation and insists it broke nothing.
fn sim_run(config: &SimConfig) -> SimReport {
    let report = tenure_sim::run(config);
    if let Some(violation) = report.violations.first() {
        panic!(
            "simulation seed {} broke {} properties, first: {violation}",
            config.seed,
            report.violations.len()
        );
    }
    report
}

fn simulation(c: &mut Criterion) {
    let config = sim_config(SIM_SEED);
    let simulated = sim_run(&config).simulated;
    let millis = u64::try_from(simulated.as_millis()).expect("simulated ms fit in u64");
    let mut group = c.benchmark_group("simulation");
    group.throughput(Throughput::Elements(millis));
    group.bench_function("members=10,partitions=100", |b| {
        b.iter(|| sim_run(black_box(&config)))
    });
    group.finish();
}

/// Whether the `sim_seconds_per_wall_second` line belongs in this run: not
/// in `--test` or `--list` mode, and not when every filter given misses
/// `simulation`.
fn wants_sim_rate() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--test" || a == "--list") {
        return false;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| "simulation".contains(f.as_str()) || f.contains("simulation"))
}

/// Simulated seconds per wall second over a few timed runs, one per seed.
fn print_sim_rate() {
    let mut simulated = Duration::ZERO;
    let mut wall = Duration::ZERO;
    for seed in SIM_RATE_SEEDS {
        let config = sim_config(seed);
        let start = Instant::now();
        let report = sim_run(&config);
        wall += start.elapsed();
        simulated += report.simulated;
    }
    let rate = simulated.as_secs_f64() / wall.as_secs_f64();
    println!("sim_seconds_per_wall_second={rate:.1} (members=10 partitions=100)");
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = simulation
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if wants_sim_rate() {
        print_sim_rate();
    }
}
