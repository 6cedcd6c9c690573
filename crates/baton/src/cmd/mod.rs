//! The client subcommands, one file each. Every command prints one clear line on error and
//! exits non-zero; `--json` prints the API's JSON instead of human text.

pub mod auth;
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

/// Options every client command takes (no `Debug`: it holds the token).
#[derive(Args, Clone)]
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
    /// Bearer token for servers started with --auth (prefer BATON_TOKEN or --token-file:
    /// a command line is visible to other users of the machine).
    #[arg(long, env = "BATON_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A CA bundle (PEM) to trust for the servers' TLS certificates; endpoints without a
    /// scheme then use https.
    #[arg(long, env = "BATON_CACERT", global = true, value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
    /// A file whose first line is the bearer token.
    #[arg(
        long,
        env = "BATON_TOKEN_FILE",
        global = true,
        value_name = "FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<std::path::PathBuf>,
}

impl Global {
    /// A client for the endpoints, with the token if one is given.
    pub fn client(&self) -> anyhow::Result<Client> {
        let mut builder = Client::builder(self.endpoints.split(','));
        if let Some(token) = self.token()? {
            builder = builder.token(token);
        }
        if let Some(path) = &self.cacert {
            let pem = std::fs::read(path).map_err(|e| {
                anyhow::anyhow!("cannot read the CA bundle {}: {e}", path.display())
            })?;
            builder = builder.ca_cert_pem(pem);
        }
        Ok(builder.build()?)
    }

    /// The token from --token / BATON_TOKEN or the first line of --token-file.
    pub fn token(&self) -> anyhow::Result<Option<String>> {
        if let Some(token) = &self.token {
            return Ok(Some(token.trim().to_owned()));
        }
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        first_line(path, "the token file").map(Some)
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

/// The first line of a file holding a secret (`what` names it in errors), trimmed; an
/// empty one is refused.
pub fn first_line(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    let line = text.lines().next().unwrap_or("").trim().to_owned();
    anyhow::ensure!(!line.is_empty(), "{what} {} is empty", path.display());
    Ok(line)
}
