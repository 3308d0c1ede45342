//! The real ZooKeeper of `scripts/services`: where it is, and a client of
//! it. A missing or silent server fails the test with the command that
//! starts it, never a skip.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zookeeper_client as zk;

pub const HOW_TO_START: &str = "start it with `eval \"$(scripts/services start)\"` (it sets \
     TENURE_ZOOKEEPER), or run scripts/test";

/// The server's address; fails the test if it is not set.
pub fn address() -> String {
    match std::env::var("TENURE_ZOOKEEPER") {
        Ok(a) if !a.trim().is_empty() => a.trim().to_owned(),
        _ => {
            panic!("TENURE_ZOOKEEPER is not set: this test needs a real ZooKeeper; {HOW_TO_START}")
        }
    }
}

/// A client of `connect` (an address, with or without a chroot); fails the
/// test if the server does not answer.
pub async fn client(connect: &str) -> zk::Client {
    let connecting = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect);
    match tokio::time::timeout(Duration::from_secs(5), connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!("ZooKeeper at {connect} does not answer ({e}); {HOW_TO_START}"),
        Err(_) => panic!("ZooKeeper at {connect} does not answer within 5 s; {HOW_TO_START}"),
    }
}

/// Makes a chroot no other test uses, named after `test`; returns the
/// server's address and the chroot (connect to `{address}{chroot}`).
pub async fn fresh_chroot(test: &str) -> (String, String) {
    let address = address();
    let chroot = fresh_chroot_at(&address, test).await;
    (address, chroot)
}

/// A new chroot for `test` on the server (or ensemble) at `address`.
pub async fn fresh_chroot_at(address: &str, test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let chroot = format!("/tenure-test-{test}-{nanos}");
    client(address)
        .await
        .create(
            &chroot,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("create the test's chroot");
    chroot
}
