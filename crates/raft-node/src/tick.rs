//! [`Tick`]: an instant in 8 bytes, for what a node keeps per lease.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// An instant on this node's monotonic clock as nanoseconds since [`epoch`]: 8 bytes
/// where an `Instant` takes 16, kept for every lease by the lease clock and the lease
/// records (decisions #105, #114).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tick(pub(crate) u64);

impl Tick {
    /// `at` as a tick; an instant before the epoch counts as the epoch (it is past either
    /// way) and one 584 years after it as the last tick.
    pub(crate) fn of(at: Instant) -> Tick {
        Tick(nanos(at.saturating_duration_since(epoch())))
    }

    /// The instant again (exact: both count nanoseconds).
    pub(crate) fn instant(self) -> Instant {
        epoch() + Duration::from_nanos(self.0)
    }
}

/// A duration in nanoseconds, the last one for anything beyond 584 years.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The origin of ticks: a year before the first tick was taken, so no instant the clock
/// handles comes before it. Where the platform's clock could not go back that far it
/// would be the first tick's time; Linux's can (a unit test checks).
pub(crate) fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(365 * 24 * 3600))
            .unwrap_or(now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_keep_instants_exactly_and_count_earlier_ones_as_the_epoch() {
        let now = Instant::now();
        for nanos in [0, 1, 999_999, 3_600_000_000_123] {
            let at = now + Duration::from_nanos(nanos);
            assert_eq!(Tick::of(at).instant(), at);
        }
        assert!(Tick::of(now) < Tick::of(now + Duration::from_nanos(1)));
        if let Some(before) = epoch().checked_sub(Duration::from_secs(1)) {
            assert_eq!(Tick::of(before), Tick(0));
        }
        // On Linux the monotonic clock goes back a year, so nothing real is clamped.
        #[cfg(target_os = "linux")]
        assert!(now.duration_since(epoch()) >= Duration::from_secs(364 * 24 * 3600));
        assert_eq!(std::mem::size_of::<Tick>(), 8);
    }
}
