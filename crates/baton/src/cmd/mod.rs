//! The client subcommands, one file each. Every command prints one clear line on error and
//! exits non-zero; `--json` prints the API's JSON instead of human text.

pub mod cluster;
pub mod elect;
pub mod kv;
pub mod lease;
pub mod locks;
pub mod run_locked;
pub mod supervise;
pub mod watch;

use baton_client::Client;
use clap::Args;
use serde::Serialize;

/// Options every client command takes.
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Comma-separated node API addresses; the first that answers is used.
    #[arg(
        long,
        env = "BATON_ENDPOINTS",
        default_value = "127.0.0.1:7070",
        global = true
    )]
    pub endpoints: String,
    /// Print JSON instead of human text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl Global {
    /// A client for the endpoints.
    pub fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(self.endpoints.split(','))?)
    }

    /// Prints `value` as JSON (the API's shape), or `human` otherwise.
    #[allow(clippy::print_stdout)]
    pub fn print<T: Serialize>(&self, value: &T, human: impl FnOnce() -> String) {
        if self.json {
            match serde_json::to_string(value) {
                Ok(json) => println!("{json}"),
                Err(e) => println!("{{\"error\": \"{e}\"}}"),
            }
        } else {
            println!("{}", human());
        }
    }
}

/// A tokio runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
