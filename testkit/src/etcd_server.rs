//! The real etcd of `scripts/services`: where it is, and a client of it. A
//! missing or silent server fails the test with the command that starts
//! it, never a skip.

use std::time::Duration;

use etcd_client::Client;

pub const HOW_TO_START: &str = "start it with `eval \"$(scripts/services start)\"` (it sets \
     TENURE_ETCD), or run scripts/test";

/// The server's endpoint (`http://host:port`); fails the test if it is not
/// set.
pub fn endpoint() -> String {
    match std::env::var("TENURE_ETCD") {
        Ok(a) if !a.trim().is_empty() => a.trim().to_owned(),
        _ => panic!("TENURE_ETCD is not set: this test needs a real etcd; {HOW_TO_START}"),
    }
}

/// A client of the server that has been answered once (the client connects
/// lazily); fails the test if the server does not answer.
pub async fn client(endpoint: &str) -> Client {
    let connecting = async {
        // A cluster's endpoints come comma-separated, as members take them.
        let mut client = Client::connect(endpoint.split(',').collect::<Vec<_>>(), None).await?;
        client.status().await?;
        Ok::<_, etcd_client::Error>(client)
    };
    match tokio::time::timeout(Duration::from_secs(5), connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!("etcd at {endpoint} does not answer ({e}); {HOW_TO_START}"),
        Err(_) => panic!("etcd at {endpoint} does not answer within 5 s; {HOW_TO_START}"),
    }
}
