//! `chaos proxy`: a TCP proxy process in front of every store node, one
//! per member. Freezing it (SIGSTOP) cuts its member off from the store and
//! from nothing else.

use std::io::Write;

/// A proxy's flags, as the chaos run passes them.
#[derive(clap::Args)]
pub struct ProxyArgs {
    /// The store's nodes, `host:port,...`.
    #[arg(long)]
    to: String,
}

/// Listens on a port of its own for each node of `--to`, prints the
/// addresses it listens on (`host:port,...`, in the order of `--to`), and
/// forwards every connection to its node until it is killed.
pub async fn run(args: ProxyArgs) -> Result<bool, String> {
    let mut listening = Vec::new();
    for target in args.to.split(',') {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("proxy: bind: {e}"))?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        listening.push(address.to_string());
        let target = target.to_owned();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
    }
    println!("{}", listening.join(","));
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
    Ok(true)
}
