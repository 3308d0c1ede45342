//! Test tools shared by tenure's suites (the backends' own tests and the
//! workspace's `tests/` crate): a driver that starts one backend with no
//! runtime and no core, a TCP proxy in front of a store that a test can
//! stall or cut, and where the real servers of `scripts/services` are. A
//! missing server fails the test with the command that starts it, never a
//! skip.
//!
//! The clients of the real servers are behind features, so a suite builds
//! only the store it tests: `zookeeper`, `etcd` (which needs `protoc`).

pub mod driver;
#[cfg(feature = "etcd")]
pub mod etcd_server;
pub mod proxy;
#[cfg(feature = "zookeeper")]
pub mod zookeeper_server;
