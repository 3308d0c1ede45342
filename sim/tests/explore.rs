//! The exhaustive explorer on small bounds that close in a few seconds in
//! a debug build. The runner (`cargo run --release -p tenure-sim
//! --example explore -- --partitions 3`) searches the full
//! configuration.

use std::time::Duration;

use tenure_sim::{explore, replay, ExploreConfig};

fn quiet(members: usize, partitions: u32) -> ExploreConfig {
    without_faults(ExploreConfig::new(members, partitions))
}

/// `config` with no fault of the single node's kinds.
fn without_faults(mut config: ExploreConfig) -> ExploreConfig {
    config.losses = 0;
    config.disconnects = 0;
    config.restarts = 0;
    config
}

#[test]
fn a_fault_free_group_with_one_reorder_keeps_every_property() {
    let config = quiet(2, 2);
    let report = explore(&config).expect("valid configuration");
    if let Some(violation) = &report.violation {
        panic!("{violation}");
    }
    assert_eq!(report.cut, 0, "the search closes on its own");
    assert!(report.states > 100, "only {} states", report.states);
    assert!(report.lookahead_steps > 0, "convergence was followed");
    // A member's claims of both partitions in one step go together.
    assert!(report.batch_deliveries > 0, "no batch reached the store");
}

#[test]
fn a_restart_anywhere_keeps_every_property() {
    let mut config = quiet(2, 1);
    config.restarts = 1;
    config.reorders = Some(0);
    let report = explore(&config).expect("valid configuration");
    if let Some(violation) = &report.violation {
        panic!("{violation}");
    }
    assert_eq!(report.cut, 0);
    // A restarted member waits for its old session to expire before it
    // can register again: convergence takes at least a session timeout.
    assert!(
        report.slowest_convergence >= config.session_timeout,
        "{:?}",
        report.slowest_convergence
    );
}

#[test]
fn a_violation_comes_with_a_path_that_replays_it() {
    // Nothing converges in 10 ms after a restart: the search must say so,
    // with the steps that lead there.
    let mut config = quiet(2, 1);
    config.restarts = 1;
    config.reorders = Some(0);
    config.convergence_limit = Some(Duration::from_millis(10));
    let report = explore(&config).expect("valid configuration");
    let violation = report.violation.expect("a convergence violation");
    assert_eq!(violation.property, "convergence");
    assert_eq!(violation.steps.len(), violation.moves.len());
    assert!(!violation.continuation.is_empty());
    let replayed = replay(&config, &violation.moves).expect("the path replays");
    assert_eq!(replayed.steps, violation.steps);
    assert!(replayed.converged.is_err(), "{:?}", replayed.converged);
}

#[test]
fn a_bad_configuration_is_refused() {
    let mut config = quiet(2, 2);
    config.quantum = Duration::from_millis(70);
    assert!(explore(&config).is_err());
    assert!(replay(&ExploreConfig::new(0, 2), &[]).is_err());
}

#[test]
fn any_one_fault_on_one_partition_keeps_every_property() {
    let mut config = ExploreConfig::new(2, 1);
    config.reorders = Some(0);
    let report = explore(&config).expect("valid configuration");
    if let Some(violation) = &report.violation {
        panic!("{violation}");
    }
    assert_eq!(report.cut, 0);
    assert!(report.states > 1000, "only {} states", report.states);
}

/// On a ZooKeeper ensemble with any follower cut and no other fault (an
/// election as well takes minutes in a debug build: `scripts/test` runs
/// it in a release one).
fn cut_only(members: usize, partitions: u32) -> ExploreConfig {
    let mut config = without_faults(ExploreConfig::on_an_ensemble(members, partitions));
    config.elections = 0;
    config.reorders = Some(0);
    config
}

#[test]
fn a_follower_cut_anywhere_keeps_every_property() {
    let config = cut_only(2, 1);
    let report = explore(&config).expect("valid configuration");
    if let Some(violation) = &report.violation {
        panic!("{violation}");
    }
    assert_eq!(report.cut, 0, "the search closes on its own");
    assert!(report.states > 1000, "only {} states", report.states);
}

/// The first violation the explorer finds on an ensemble whose members
/// count renewals as `shape` says.
fn violation_on_an_ensemble(shape: impl Fn(&mut tenure_sim::Ensemble)) -> String {
    let mut config = cut_only(2, 2);
    if let Some(ensemble) = &mut config.ensemble {
        shape(ensemble);
    }
    let report = explore(&config).expect("valid configuration");
    let violation = report.violation.expect("a violation");
    let replayed = replay(&config, &violation.moves).expect("the path replays");
    assert_eq!(replayed.steps, violation.steps);
    violation.to_string()
}

#[test]
fn the_ensemble_explorer_finds_every_answer_counted_at_once() {
    // A heartbeat held at a cut-off follower is answered at the heal, ahead
    // of the report the leader waited for: counted at once, the member's
    // lease outlasts the session the leader keeps.
    let found = violation_on_an_ensemble(|e| e.counted_after = Duration::ZERO);
    assert!(found.contains("lease ends"), "{found}");
}

#[test]
fn the_ensemble_explorer_finds_a_followers_reads_taken_for_renewals() {
    let found = violation_on_an_ensemble(|e| e.reads_renew = true);
    assert!(found.contains("lease ends"), "{found}");
}

#[test]
fn the_etcd_explorer_finds_every_answer_taken_for_a_renewal() {
    // Only keep-alives renew an etcd lease: counting a write's answer as
    // one runs the member's lease past the leader's deadline.
    let mut config = ExploreConfig::on_etcd(2, 2);
    config.reorders = Some(0);
    if let Some(etcd) = &mut config.etcd {
        etcd.answers_renew = true;
    }
    let report = explore(&config).expect("valid configuration");
    let violation = report.violation.expect("a violation");
    let replayed = replay(&config, &violation.moves).expect("the path replays");
    assert_eq!(replayed.steps, violation.steps);
    assert!(violation.to_string().contains("lease ends"), "{violation}");
}
