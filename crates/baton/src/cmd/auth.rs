//! `baton auth`: make tokens and the hashes the auth file stores (no server needed).

use clap::Subcommand;
use std::io::BufRead;

/// `baton auth …`.
#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// Print the SHA-256 of a token read from standard input (the first line), for the
    /// auth file's `token_sha256`. The token never goes on the command line.
    Hash,
    /// Make a new random token (244 random bits) and print it with its SHA-256.
    Token,
}

/// Runs an auth subcommand.
#[allow(clippy::print_stdout)]
pub fn run(command: AuthCommand) -> anyhow::Result<i32> {
    match command {
        AuthCommand::Hash => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            let token = line.trim();
            anyhow::ensure!(!token.is_empty(), "no token on standard input");
            println!("{}", baton_http_api::auth::token_hash(token));
        }
        AuthCommand::Token => {
            let token = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            println!("token = \"{token}\"");
            println!(
                "token_sha256 = \"{}\"",
                baton_http_api::auth::token_hash(&token)
            );
        }
    }
    Ok(0)
}
