//! `tenure`: who is in a group, who owns which partition, how far behind
//! each partition is, and moving its committed offsets. See
//! `tenure --help`.

fn main() -> std::process::ExitCode {
    tenure_cli::main()
}
