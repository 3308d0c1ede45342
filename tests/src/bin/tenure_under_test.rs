//! The `tenure` command, as tenure-cli's binary builds it, for the CLI
//! tests to spawn.

fn main() -> std::process::ExitCode {
    tenure_cli::main()
}
