//! The one baton binary. `baton serve` and the CLI arrive with the HTTP API and client issues;
//! until then it says so and exits with status 2 rather than pretending to serve.

#![allow(clippy::print_stderr)]

fn main() {
    eprintln!("baton: `serve` and the CLI are not built yet (see the HTTP API issue)");
    std::process::exit(2);
}
