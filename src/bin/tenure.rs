//! `tenure`: who is in a group, who owns which partition, how far behind
//! each partition is, and moving its committed offsets. The command is
//! [`tenure::cli`]; see `tenure --help`.

fn main() -> std::process::ExitCode {
    tenure::cli::main()
}
