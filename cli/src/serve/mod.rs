//! `tenure serve`: a [`Monitor`] of the store's groups, served over HTTP
//! (read-only) as Prometheus metrics, a JSON API and a live page; and
//! `tenure describe --watch`, the same picture of one group in the
//! terminal.

mod http;
mod metrics;
mod page;
mod terminal;

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use tenure_admin::{AdminError, Connector, GroupAdmin, GroupFilter, Monitor, MonitorConfig};

use crate::args::{Connection, ServeArgs};
use crate::connect::{connect_kafka, connect_store, Store};
use crate::error::Failure;

pub use terminal::watch_group;

/// Runs `tenure serve` until interrupted (Ctrl-C or SIGTERM).
pub async fn serve(
    store: Store,
    connection: Connection,
    first: Box<dyn GroupAdmin>,
    args: ServeArgs,
) -> Result<ExitCode, Failure> {
    if !args.listen.ip().is_loopback() && args.token.is_none() {
        return Err(Failure::ServeOpen {
            listen: args.listen,
        });
    }
    for group in &args.groups {
        tenure_core::types::validate_path_element("group", group).map_err(AdminError::from)?;
    }
    let Some(kafka) = connect_kafka(&connection).await? else {
        return Err(Failure::ServeNoKafka);
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(http::tls_config(cert, key)?),
        _ => None,
    };
    let groups = if args.groups.is_empty() {
        GroupFilter::All
    } else {
        GroupFilter::Named(args.groups.iter().cloned().collect::<BTreeSet<_>>())
    };
    let config = MonitorConfig::new()
        .with_groups(groups)
        .with_kafka_interval(args.kafka_interval)
        .with_window(args.window as usize)
        .with_unowned_after(args.unowned_after);
    let monitor = Monitor::start(connector(store, connection, first), Some(kafka), config);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| Failure::Listen {
            listen: args.listen,
            source,
        })?;
    let local = listener.local_addr().map_err(Failure::Serve)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    // The tests read the port from this line when they ask for port 0.
    eprintln!("tenure serve: listening on {scheme}://{local}/");
    http::serve(listener, monitor, args.token, tls).await?;
    Ok(ExitCode::SUCCESS)
}

/// Connects to the store again whenever the monitor lost it; the first
/// time hands over the connection made (and checked) at start.
pub(crate) fn connector(
    store: Store,
    connection: Connection,
    first: Box<dyn GroupAdmin>,
) -> Connector {
    let first = Arc::new(Mutex::new(Some(first)));
    Box::new(move || {
        let first = first.lock().ok().and_then(|mut f| f.take());
        let (store, connection) = (store.clone(), connection.clone());
        Box::pin(async move {
            if let Some(first) = first {
                return Ok(first);
            }
            connect_store(store, &connection)
                .await
                .map_err(|failure| match failure {
                    Failure::Admin(error) => error,
                    other => AdminError::Unreachable {
                        store: "the store".to_owned(),
                        detail: other.to_string(),
                    },
                })
        })
    })
}
