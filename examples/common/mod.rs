//! What the examples share. Each includes it with `mod common;` (an
//! example's root file finds `common/mod.rs` beside it; cargo takes no
//! example from a folder without a `main.rs`), and uses what it needs of
//! it.

#![allow(dead_code)]

use std::process::ExitCode;

/// A coordination store, as `--store` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Store {
    #[value(name = "zookeeper")]
    ZooKeeper,
    Etcd,
}

impl Store {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Store::ZooKeeper => "zookeeper",
            Store::Etcd => "etcd",
        }
    }

    /// The variable `scripts/services` sets to its address.
    pub fn variable(self) -> &'static str {
        match self {
            Store::ZooKeeper => "TENURE_ZOOKEEPER",
            Store::Etcd => "TENURE_ETCD",
        }
    }
}

/// The address of a server of `scripts/services`, from its variable.
pub fn server(variable: &str) -> Result<String, String> {
    std::env::var(variable).map_err(|_| {
        format!(
            "{variable} is not set: start the servers with `eval \"$(scripts/services start)\"`"
        )
    })
}

/// `flag`'s value if it was given, else the server address in `variable`.
pub fn flag_or_server(flag: Option<String>, variable: &str) -> Result<String, String> {
    flag.map_or_else(|| server(variable), Ok)
}

/// How an example's run ends: its error on stderr after its name.
pub fn exit(name: &str, result: Result<(), String>) -> ExitCode {
    let Err(message) = result else {
        return ExitCode::SUCCESS;
    };
    eprintln!("{name}: {message}");
    ExitCode::FAILURE
}
