//! Searches every state a small group of real members can reach on the
//! store model, with every order of deliveries and a bounded number of
//! faults, and checks the simulator's properties in each (see
//! `tenure_sim::explore`).
//!
//! ```text
//! cargo run --release -p tenure-sim --example explore -- --members 2 --partitions 2
//! cargo run --release -p tenure-sim --example explore -- --partitions 3 --max-depth 30
//! cargo run --release -p tenure-sim --example explore -- --partitions 3 --replay 0,4,1
//! ```
//!
//! Flags: `--members M` (default 2), `--partitions P` (default 2),
//! `--messages N` per partition (default 1), `--losses L`, `--disconnects
//! D`, `--restarts R` (the fault budget, default 1 each), `--max-depth D`
//! (default: none, the search runs until it closes), `--max-states N`,
//! `--strategy NAME`, `--no-convergence` (skip the fault-free
//! continuations), `--progress N` (a line on stderr every N states),
//! `--replay I,J,...` (take those steps from the start, printing each, the
//! properties they break and the fault-free continuation).
//!
//! A violation prints the property, the path of steps that reaches it and
//! the `--replay` argument that takes it again, and the exit code is 1.
//! Last line: `explore members=M partitions=P states=N transitions=T
//! max_depth=D violations=V bound=<what the search covered>`.

use std::process::ExitCode;
use std::time::Instant;

use tenure_sim::{explore, replay, ExploreConfig};

struct Args {
    config: ExploreConfig,
    replay: Option<Vec<usize>>,
}

const USAGE: &str = "usage: explore [--members M] [--partitions P] [--messages N] [--losses L] \
[--disconnects D] [--restarts R] [--max-depth D] [--max-states N] [--strategy sticky|range|round-robin] \
[--no-convergence] [--progress N] [--replay I,J,...]";

fn parse() -> Result<Args, String> {
    let mut config = ExploreConfig::new(2, 2);
    let mut replay = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let number = |text: String, name: &str| -> Result<u64, String> {
            text.parse()
                .map_err(|_| format!("{name}: {text:?} is not a number"))
        };
        match flag.as_str() {
            "--members" => config.members = number(value("--members")?, "--members")? as usize,
            "--partitions" => {
                config.partitions = u32::try_from(number(value("--partitions")?, "--partitions")?)
                    .map_err(|_| "--partitions: too many")?
            }
            "--messages" => {
                config.messages = i64::try_from(number(value("--messages")?, "--messages")?)
                    .map_err(|_| "--messages: too many")?
            }
            "--losses" => config.losses = number(value("--losses")?, "--losses")? as u32,
            "--reorders" => {
                config.reorders = match value("--reorders")?.as_str() {
                    "any" => None,
                    n => Some(number(n.to_owned(), "--reorders")? as u32),
                }
            }
            "--max-delay" => {
                config.max_delay = number(value("--max-delay")?, "--max-delay")? as u32
            }
            "--lazy-app" => config.eager_app = false,
            "--disconnects" => {
                config.disconnects = number(value("--disconnects")?, "--disconnects")? as u32
            }
            "--restarts" => config.restarts = number(value("--restarts")?, "--restarts")? as u32,
            "--faults" => config.faults = Some(number(value("--faults")?, "--faults")? as u32),
            "--max-depth" => {
                config.max_depth = Some(number(value("--max-depth")?, "--max-depth")? as u32)
            }
            "--max-states" => {
                config.max_states = Some(number(value("--max-states")?, "--max-states")?)
            }
            "--strategy" => config.strategy = value("--strategy")?,
            "--no-convergence" => config.convergence = false,
            "--progress" => config.progress_every = number(value("--progress")?, "--progress")?,
            "--replay" => {
                let text = value("--replay")?;
                let moves = text
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| number(s.to_owned(), "--replay").map(|n| n as usize))
                    .collect::<Result<Vec<_>, _>>()?;
                replay = Some(moves);
            }
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown flag {other:?} (try --help)")),
        }
    }
    Ok(Args { config, replay })
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let config = &args.config;
    if let Some(moves) = &args.replay {
        return match replay(config, moves) {
            Ok(replayed) => {
                for (i, step) in replayed.steps.iter().enumerate() {
                    println!("{i:>4}. {step}");
                    for (at, property, detail) in &replayed.problems {
                        if *at == i {
                            println!("      VIOLATION {property}: {detail}");
                        }
                    }
                }
                println!("fault-free continuation:");
                for step in &replayed.continuation {
                    println!("      {step}");
                }
                match &replayed.converged {
                    Ok(took) => println!("converged after {took:?}"),
                    Err(why) => println!("did not converge: {why}"),
                }
                if replayed.problems.is_empty() && replayed.converged.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => {
                eprintln!("replay: {error}");
                ExitCode::from(2)
            }
        };
    }
    let started = Instant::now();
    let report = match explore(config) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("explore: {error}");
            return ExitCode::from(2);
        }
    };
    let violations = usize::from(report.violation.is_some());
    if let Some(violation) = &report.violation {
        println!("VIOLATION {violation}");
    }
    println!(
        "explored in {:.1?}: {} continuation steps beyond the search, slowest convergence {:?}",
        started.elapsed(),
        report.lookahead_steps,
        report.slowest_convergence
    );
    println!(
        "explore members={} partitions={} states={} transitions={} max_depth={} violations={} bound={}",
        config.members,
        config.partitions,
        report.states,
        report.transitions,
        report.max_depth,
        violations,
        config.bound(&report)
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
