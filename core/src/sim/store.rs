//! In-memory store with ZooKeeper's semantics (stub).
