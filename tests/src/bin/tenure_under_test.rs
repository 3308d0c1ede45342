//! The `tenure` command, as the facade's binary builds it, for the CLI tests
//! to spawn.

fn main() -> std::process::ExitCode {
    tenure::cli::main()
}
