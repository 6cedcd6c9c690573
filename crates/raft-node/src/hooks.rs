//! Test-only hooks that break safety on purpose: the Jepsen harness's canaries (a server
//! that misbehaves in one known way, which the checkers must catch) and the crash points
//! of `store::crash`. They exist only in builds with the `unsafe-test-hooks` feature, which
//! release builds do not have; the workspace's own tests turn it on (a dev-dependency of
//! this crate on itself). A build without the hooks refuses to start when one of their
//! environment variables is set, so nobody believes they ran a canary that was compiled out.

use crate::error::NodeError;
use crate::store::SmShared;
use baton_state_machine::StateMachine;

/// Whether this build has the hooks.
pub const COMPILED: bool = cfg!(feature = "unsafe-test-hooks");

/// The variable that arms a canary: `BATON_UNSAFE_CANARY=<name>` (see [`Canary::name`]).
pub const CANARY_VAR: &str = "BATON_UNSAFE_CANARY";

/// Prefixes of every variable that arms a hook.
const HOOK_PREFIXES: [&str; 2] = ["BATON_UNSAFE_", "BATON_TEST_"];

/// One deliberate violation, for the harness to catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canary {
    /// Leases end a quarter of their TTL after each reset (`expire-early`).
    ExpireEarly,
    /// Every fifth grant of a lock answers with the fence of the grant before it
    /// (`duplicate-fence`).
    DuplicateFence,
    /// Grants appear in the event stream as if they had jumped the queue (`barging`).
    Barging,
    /// Every watch stream silently drops its 20th event (`drop-watch-event`).
    DropWatchEvent,
    /// Followers answer linearizable reads from a copy of their state up to a second old,
    /// without a read index (`stale-read`).
    StaleRead,
}

impl Canary {
    /// Every canary.
    pub const ALL: [Canary; 5] = [
        Canary::ExpireEarly,
        Canary::DuplicateFence,
        Canary::Barging,
        Canary::DropWatchEvent,
        Canary::StaleRead,
    ];

    /// Its name, the value of [`CANARY_VAR`].
    pub fn name(self) -> &'static str {
        match self {
            Canary::ExpireEarly => "expire-early",
            Canary::DuplicateFence => "duplicate-fence",
            Canary::Barging => "barging",
            Canary::DropWatchEvent => "drop-watch-event",
            Canary::StaleRead => "stale-read",
        }
    }
}

/// The canary armed in this process (read once), if this build has the hooks.
pub fn canary() -> Option<Canary> {
    #[cfg(feature = "unsafe-test-hooks")]
    {
        static ARMED: std::sync::OnceLock<Option<Canary>> = std::sync::OnceLock::new();
        *ARMED.get_or_init(|| {
            let value = std::env::var(CANARY_VAR).ok()?;
            let canary = Canary::ALL.into_iter().find(|c| c.name() == value);
            if let Some(c) = canary {
                // A warning, not an error: the crash checker judges the canary's effects,
                // not this line.
                tracing::warn!(
                    canary = c.name(),
                    "this server is UNSAFE on purpose (test only)"
                );
            }
            canary
        })
    }
    #[cfg(not(feature = "unsafe-test-hooks"))]
    {
        None
    }
}

/// Refuses to start when a hook variable is set that this build cannot honour: the build
/// has no hooks, or the canary's name is unknown.
pub fn check_environment() -> Result<(), NodeError> {
    let set: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| HOOK_PREFIXES.iter().any(|p| k.starts_with(p)))
        .collect();
    if set.is_empty() {
        return Ok(());
    }
    if !COMPILED {
        return Err(NodeError::Config(format!(
            "{} set, but this build has no test hooks (build with --features unsafe-test-hooks)",
            set.join(", ")
        )));
    }
    if let Ok(value) = std::env::var(CANARY_VAR)
        && !Canary::ALL.iter().any(|c| c.name() == value)
    {
        let names: Vec<&str> = Canary::ALL.iter().map(|c| c.name()).collect();
        return Err(NodeError::Config(format!(
            "{CANARY_VAR}={value}: not a canary (one of {})",
            names.join(", ")
        )));
    }
    Ok(())
}

/// TEST ONLY, the `stale-read` canary: runs `f` on a copy of the applied state taken at most
/// a second ago (refreshed when older).
pub(crate) fn stale_view<R>(sm: &SmShared, f: impl FnOnce(&StateMachine) -> R) -> R {
    type View = Option<(std::time::Instant, std::sync::Arc<StateMachine>)>;
    static VIEW: std::sync::Mutex<View> = std::sync::Mutex::new(None);
    let view = {
        let mut view = VIEW.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = view
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < std::time::Duration::from_secs(1));
        if !fresh {
            *view = Some((
                std::time::Instant::now(),
                std::sync::Arc::new(sm.query(StateMachine::clone)),
            ));
        }
        view.as_ref().map(|(_, s)| s.clone())
    };
    match view {
        Some(state) => f(&state),
        None => sm.query(f),
    }
}
