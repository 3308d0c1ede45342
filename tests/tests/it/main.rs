//! tenure's integration tests against the real servers of
//! `scripts/services`: one test binary, a module per suite, so that the
//! whole tree is linked once rather than once per suite.
//!
//! Cargo runs one binary's tests on several threads at once. Most suites
//! share the servers (each test under a group, chroot or prefix of its
//! own) and run side by side; the few that restart a server, kill or cut
//! off a node of a 3-node cluster, or change the process's environment
//! take their turn alone ([`turns`]), so that no other test runs while
//! they do.

mod cli;
mod conformance;
mod consumer_api;
mod consumer_process;
mod etcd_cluster;
mod etcd_cut_off;
mod etcd_group;
mod etcd_tls;
mod exactly_once;
mod kafka_budget;
mod kafka_codecs;
mod kafka_e2e;
mod kafka_fairness;
mod kafka_lanes;
mod kafka_outage;
mod kafka_patterns;
mod kafka_secured;
mod kafka_transactions;
mod memory_group;
mod process_signals;
mod serve;
mod serve_restart;
mod static_membership;
mod store_races;
mod store_restart;
mod telemetry;
mod telemetry_kafka;
mod tls_trust;
mod turns;
mod zookeeper_auth;
mod zookeeper_cluster;
mod zookeeper_cut_off;
mod zookeeper_follower_session;
mod zookeeper_group;
mod zookeeper_tls;
